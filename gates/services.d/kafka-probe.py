#!/usr/bin/env python3
"""gates/services.d/kafka-probe.py: a Kafka protocol check with no dependencies.

usage: kafka-probe.py HOST:PORT [--timeout SECONDS] [--txn-init ID]

Sends ApiVersions (v0), then Metadata (the highest non-flexible version the
broker offers, v1..v8, asking for no topics), and prints KEY=value lines:
  api_count, metadata_version, cluster_id, controller_id, brokers (id@host:port,...)
With --txn-init ID it then asks for the transaction coordinator of ID
(FindCoordinator v1, key type 1) and sends it InitProducerId v1 for ID, as a
transactional producer's init does; a coordinator still loading its state
is asked again within the timeout. It adds:
  txn_coordinator (id@host:port), txn_producer (producer id/epoch)
Exit 0 when everything asked answered without error; 1 the broker answered
wrongly or with an error; 3 nothing answered (refused, closed, timed out);
2 bad usage. Only loopback addresses are accepted (127.0.0.0/8).
"""
import ipaddress
import socket
import struct
import sys
import time


def usage(code):
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    sys.exit(code)


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError("response truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def string(self):
        n = self.i16()
        return None if n < 0 else self.take(n).decode("utf-8", "replace")


def put_string(s):
    data = s.encode()
    return struct.pack(">h", len(data)) + data


# The coordinator is not ready yet: COORDINATOR_LOAD_IN_PROGRESS,
# COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS.
RETRIABLE = {14, 15, 16, 51}


def txn_init(host, port, txn_id, timeout, deadline):
    """FindCoordinator for txn_id, then InitProducerId at the coordinator,
    asked again while the coordinator is not ready; (coordinator, pid, epoch)."""
    last = "nothing asked"
    while True:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            r = request(sock, 10, 1, 3, put_string(txn_id) + b"\x01")
            r.i32()  # throttle_time_ms
            err, _msg, node, chost, cport = r.i16(), r.string(), r.i32(), r.string(), r.i32()
        if err == 0:
            if not ipaddress.ip_address(chost).is_loopback:
                raise ValueError(f"the coordinator is {chost}:{cport}, not on loopback")
            with socket.create_connection((chost, cport), timeout=timeout) as sock:
                r = request(sock, 22, 1, 4, put_string(txn_id) + struct.pack(">i", 60000))
                r.i32()  # throttle_time_ms
                err, pid, epoch = r.i16(), r.i64(), r.i16()
            if err == 0:
                return f"{node}@{chost}:{cport}", pid, epoch
            last = f"InitProducerId error {err}"
        else:
            last = f"FindCoordinator error {err}"
        if err not in RETRIABLE:
            raise ValueError(last)
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no transactional init within the timeout (last: {last})")
        time.sleep(0.2)


def request(sock, api_key, version, correlation, body):
    client = b"clink-services-probe"
    header = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
    msg = header + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    if size < 4 or size > 16 * 1024 * 1024:
        raise ValueError(f"implausible response size {size}")
    r = Reader(recv_exact(sock, size))
    got = r.i32()
    if got != correlation:
        raise ValueError(f"correlation id {got}, expected {correlation}")
    return r


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return buf


def main(argv):
    if len(argv) < 1 or argv[0] in ("-h", "--help"):
        usage(0 if argv and argv[0] in ("-h", "--help") else 2)
    timeout, txn_id = 5.0, None
    rest = argv[1:]
    while rest:
        if rest[0] == "--timeout" and len(rest) >= 2:
            timeout = float(rest[1])
        elif rest[0] == "--txn-init" and len(rest) >= 2 and rest[1]:
            txn_id = rest[1]
        else:
            usage(2)
        rest = rest[2:]
    host, _, port = argv[0].rpartition(":")
    try:
        if not ipaddress.ip_address(host).is_loopback:
            print(f"kafka-probe: {host} is not a loopback address; refused", file=sys.stderr)
            return 2
        port = int(port)
    except ValueError:
        print(f"kafka-probe: bad address {argv[0]!r} (want 127.x.x.x:PORT)", file=sys.stderr)
        return 2

    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        print(f"kafka-probe: no answer from {host}:{port}: {e}", file=sys.stderr)
        return 3
    try:
        with sock:
            r = request(sock, 18, 0, 1, b"")
            err = r.i16()
            if err != 0:
                print(f"kafka-probe: ApiVersions error code {err}", file=sys.stderr)
                return 1
            apis = {}
            for _ in range(r.i32()):
                key, lo, hi = r.i16(), r.i16(), r.i16()
                apis[key] = (lo, hi)
            if 3 not in apis:
                print("kafka-probe: the broker offers no Metadata API", file=sys.stderr)
                return 1
            lo, hi = apis[3]
            version = min(hi, 8)
            if version < max(lo, 1):
                print(f"kafka-probe: no Metadata version in 1..8 (broker offers {lo}..{hi})", file=sys.stderr)
                return 1
            body = struct.pack(">i", 0)  # no topics
            if version >= 4:
                body += b"\x00"  # allow_auto_topic_creation = false
            if version >= 8:
                body += b"\x00\x00"  # no authorized operations
            r = request(sock, 3, version, 2, body)
            if version >= 3:
                r.i32()  # throttle_time_ms
            brokers = []
            for _ in range(r.i32()):
                node, bhost, bport = r.i32(), r.string(), r.i32()
                r.string()  # rack
                brokers.append(f"{node}@{bhost}:{bport}")
            cluster_id = r.string() if version >= 2 else None
            controller = r.i32()
    except (OSError, ValueError, ConnectionError) as e:
        print(f"kafka-probe: {host}:{port} did not answer the protocol: {e}", file=sys.stderr)
        return 3 if isinstance(e, (socket.timeout, ConnectionRefusedError)) else 1
    if not brokers:
        print("kafka-probe: Metadata named no broker", file=sys.stderr)
        return 1
    if txn_id is not None:
        try:
            coordinator, pid, epoch = txn_init(host, port, txn_id, timeout, time.monotonic() + timeout)
        except (OSError, ValueError, ConnectionError) as e:
            print(f"kafka-probe: no transactional init for {txn_id!r} at {host}:{port}: {e}", file=sys.stderr)
            return 3 if isinstance(e, (socket.timeout, ConnectionRefusedError, TimeoutError)) else 1
    print(f"api_count={len(apis)}")
    print(f"metadata_version={version}")
    print(f"cluster_id={cluster_id or ''}")
    print(f"controller_id={controller}")
    print(f"brokers={','.join(brokers)}")
    if txn_id is not None:
        print(f"txn_coordinator={coordinator}")
        print(f"txn_producer={pid}/{epoch}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
