//! The few Kafka protocol requests the transactional client sends itself,
//! because librdkafka has no call for them: ApiVersions (what a broker
//! implements), FindCoordinator (which broker coordinates a transactional
//! id), EndTxn under a given producer id and epoch (ending an orphan
//! transaction with its own identity) and DescribeTransactions (an orphan's
//! state before anything fences it).
//!
//! This module owns the bytes: request framing, response reading with every
//! length checked against what arrived, and nothing else. It never decides
//! what an answer means for a sink; [`super`] does. A malformed or truncated
//! answer is an error, never a default value.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The Kafka API keys this client names.
pub mod api {
    pub const CREATE_TOPICS: i16 = 19;
    pub const FIND_COORDINATOR: i16 = 10;
    pub const API_VERSIONS: i16 = 18;
    pub const INIT_PRODUCER_ID: i16 = 22;
    pub const ADD_PARTITIONS_TO_TXN: i16 = 24;
    pub const END_TXN: i16 = 26;
    pub const DESCRIBE_PRODUCERS: i16 = 61;
    pub const DESCRIBE_TRANSACTIONS: i16 = 65;
    pub const LIST_TRANSACTIONS: i16 = 66;
}

/// Kafka error codes this client tells apart.
pub mod code {
    pub const NONE: i16 = 0;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const NOT_COORDINATOR: i16 = 16;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub const INVALID_TXN_STATE: i16 = 48;
    pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
    pub const CONCURRENT_TRANSACTIONS: i16 = 51;
    pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
    pub const UNKNOWN_PRODUCER_ID: i16 = 59;
    pub const PRODUCER_FENCED: i16 = 90;
}

/// The largest answer this client accepts: its answers are small.
const MAX_RESPONSE: usize = 1 << 20;
const CLIENT_ID: &str = "clink-kafka-txn";

/// Why a request got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// No connection was made: the request never left this process.
    Connect(String),
    /// The request was (or may have been) sent, and no whole answer came back.
    Lost(String),
    /// An answer came back that does not parse.
    Malformed(String),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Connect(m) => write!(f, "could not connect: {m}"),
            WireError::Lost(m) => write!(f, "no whole answer: {m}"),
            WireError::Malformed(m) => write!(f, "malformed answer: {m}"),
        }
    }
}

/// One connection to one broker, for a few requests in turn.
pub struct Connection {
    stream: TcpStream,
    correlation: i32,
}

impl Connection {
    pub fn open(address: &str, timeout: Duration) -> Result<Connection, WireError> {
        let addrs: Vec<_> =
            address.to_socket_addrs().map_err(|e| WireError::Connect(format!("{address}: {e}")))?.collect();
        let mut last = format!("{address}: resolves to no address");
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(stream) => {
                    let set = stream
                        .set_read_timeout(Some(timeout))
                        .and_then(|()| stream.set_write_timeout(Some(timeout)))
                        .and_then(|()| stream.set_nodelay(true));
                    set.map_err(|e| WireError::Connect(format!("{address}: {e}")))?;
                    return Ok(Connection { stream, correlation: 0 });
                }
                Err(e) => last = format!("{addr}: {e}"),
            }
        }
        Err(WireError::Connect(last))
    }

    /// Sends one request and returns its answer's body (after the header).
    pub fn call(&mut self, key: i16, version: i16, flexible: bool, body: &[u8]) -> Result<Vec<u8>, WireError> {
        self.correlation = self.correlation.wrapping_add(1);
        let correlation = self.correlation;
        let frame = request_frame(key, version, correlation, flexible, body);
        self.stream.write_all(&frame).map_err(|e| WireError::Lost(format!("sending: {e}")))?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).map_err(|e| WireError::Lost(format!("reading the size: {e}")))?;
        let size = i32::from_be_bytes(size);
        let size = usize::try_from(size).map_err(|_| WireError::Malformed(format!("negative size {size}")))?;
        if size > MAX_RESPONSE {
            return Err(WireError::Malformed(format!("an answer of {size} bytes (the limit is {MAX_RESPONSE})")));
        }
        let mut answer = vec![0u8; size];
        self.stream.read_exact(&mut answer).map_err(|e| WireError::Lost(format!("reading {size} bytes: {e}")))?;
        // ApiVersions answers with the old header whatever its version.
        let response_flexible = flexible && key != api::API_VERSIONS;
        split_response(&answer, correlation, response_flexible).map(<[u8]>::to_vec)
    }
}

/// A whole request: size, header (v1, or v2 with no tags when flexible), body.
pub fn request_frame(key: i16, version: i16, correlation: i32, flexible: bool, body: &[u8]) -> Vec<u8> {
    let mut header = Vec::with_capacity(16 + CLIENT_ID.len());
    header.extend_from_slice(&key.to_be_bytes());
    header.extend_from_slice(&version.to_be_bytes());
    header.extend_from_slice(&correlation.to_be_bytes());
    put_string(&mut header, CLIENT_ID);
    if flexible {
        header.push(0); // no tagged fields
    }
    let size = header.len() + body.len();
    let mut frame = Vec::with_capacity(4 + size);
    frame.extend_from_slice(&(size as i32).to_be_bytes());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(body);
    frame
}

/// The body of an answer, once its correlation id is the one sent.
pub fn split_response(answer: &[u8], correlation: i32, flexible: bool) -> Result<&[u8], WireError> {
    let mut r = Reader::new(answer);
    let got = r.i32()?;
    if got != correlation {
        return Err(WireError::Malformed(format!("correlation id {got}, sent {correlation}")));
    }
    if flexible {
        r.skip_tags()?;
    }
    Ok(r.rest())
}

pub fn put_string(out: &mut Vec<u8>, s: &str) {
    // Every string this client sends is short: an id or a name.
    let len = i16::try_from(s.len()).unwrap_or(i16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..len as usize]);
}

pub fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_compact_string(out: &mut Vec<u8>, s: &str) {
    put_uvarint(out, s.len() as u64 + 1);
    out.extend_from_slice(s.as_bytes());
}

/// Reads an answer, every length checked against the bytes that arrived.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|end| *end <= self.buf.len()).ok_or_else(|| {
            WireError::Malformed(format!("{n} bytes wanted at {}, {} in the answer", self.pos, self.buf.len()))
        })?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn i8(&mut self) -> Result<i8, WireError> {
        Ok(i8::from_be_bytes(self.fixed()?))
    }
    pub fn i16(&mut self) -> Result<i16, WireError> {
        Ok(i16::from_be_bytes(self.fixed()?))
    }
    pub fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_be_bytes(self.fixed()?))
    }
    pub fn i64(&mut self) -> Result<i64, WireError> {
        Ok(i64::from_be_bytes(self.fixed()?))
    }

    pub fn uvarint(&mut self) -> Result<u64, WireError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.fixed::<1>()?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(WireError::Malformed("a varint longer than 64 bits".into()))
    }

    fn text(&mut self, len: usize) -> Result<String, WireError> {
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::Malformed("a string that is not UTF-8".into()))
    }

    /// A non-null string (int16 length).
    pub fn string(&mut self) -> Result<String, WireError> {
        self.nullable_string()?.ok_or_else(|| WireError::Malformed("a null where a string is required".into()))
    }

    pub fn nullable_string(&mut self) -> Result<Option<String>, WireError> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        self.text(len as usize).map(Some)
    }

    pub fn compact_string(&mut self) -> Result<String, WireError> {
        let n = self.uvarint()?;
        let len = n.checked_sub(1).ok_or_else(|| WireError::Malformed("a null compact string".into()))?;
        let len = usize::try_from(len).map_err(|_| WireError::Malformed(format!("a string of {len} bytes")))?;
        self.text(len)
    }

    /// An array's length (int32), bounded by the bytes left, `min_item` each.
    pub fn array_len(&mut self, min_item: usize) -> Result<usize, WireError> {
        let n = self.i32()?;
        let n = usize::try_from(n).map_err(|_| WireError::Malformed(format!("an array of {n} items")))?;
        self.bounded(n, min_item)
    }

    /// A compact array's length (varint N + 1; a null array is refused).
    pub fn compact_array_len(&mut self, min_item: usize) -> Result<usize, WireError> {
        let n = self.uvarint()?;
        let n = n.checked_sub(1).ok_or_else(|| WireError::Malformed("a null compact array".into()))?;
        let n = usize::try_from(n).map_err(|_| WireError::Malformed(format!("an array of {n} items")))?;
        self.bounded(n, min_item)
    }

    fn bounded(&self, n: usize, min_item: usize) -> Result<usize, WireError> {
        let left = self.buf.len() - self.pos;
        if n.saturating_mul(min_item.max(1)) > left {
            return Err(WireError::Malformed(format!("{n} items announced, {left} bytes left")));
        }
        Ok(n)
    }

    pub fn skip_tags(&mut self) -> Result<(), WireError> {
        let count = self.uvarint()?;
        for _ in 0..count {
            self.uvarint()?;
            let size = self.uvarint()?;
            let size = usize::try_from(size).map_err(|_| WireError::Malformed("a tag too large".into()))?;
            self.take(size)?;
        }
        Ok(())
    }

    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Bytes after the last field are a misread answer, not padding.
    pub fn end(&self) -> Result<(), WireError> {
        match self.buf.len() - self.pos {
            0 => Ok(()),
            n => Err(WireError::Malformed(format!("{n} bytes after the last field"))),
        }
    }
}

/// One API a broker implements, with its version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub key: i16,
    pub min: i16,
    pub max: i16,
}

pub fn api_versions(conn: &mut Connection) -> Result<Vec<ApiRange>, WireError> {
    let body = conn.call(api::API_VERSIONS, 0, false, &[])?;
    decode_api_versions(&body)
}

pub fn decode_api_versions(body: &[u8]) -> Result<Vec<ApiRange>, WireError> {
    let mut r = Reader::new(body);
    let error = r.i16()?;
    if error != code::NONE {
        return Err(WireError::Malformed(format!("ApiVersions answered error {error}")));
    }
    let n = r.array_len(6)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(ApiRange { key: r.i16()?, min: r.i16()?, max: r.i16()? });
    }
    // v0 ends here; a broker answering a later layout is read no further.
    Ok(out)
}

/// The broker coordinating a transactional id, as FindCoordinator named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    pub error: i16,
    pub message: Option<String>,
    pub node_id: i32,
    pub address: String,
}

/// FindCoordinator v1 (key type 1: a transactional id).
pub fn find_coordinator(conn: &mut Connection, transactional_id: &str) -> Result<Coordinator, WireError> {
    let mut body = Vec::new();
    put_string(&mut body, transactional_id);
    body.push(1);
    let answer = conn.call(api::FIND_COORDINATOR, 1, false, &body)?;
    decode_find_coordinator(&answer)
}

pub fn decode_find_coordinator(body: &[u8]) -> Result<Coordinator, WireError> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    let error = r.i16()?;
    let message = r.nullable_string()?;
    let node_id = r.i32()?;
    let host = r.string()?;
    let port = r.i32()?;
    r.end()?;
    Ok(Coordinator { error, message, node_id, address: format!("{host}:{port}") })
}

/// The EndTxn versions this client speaks: 0 to 2 in the classic encoding,
/// 3 and 4 flexible (compact strings, tagged fields). Version 5 is left out
/// on purpose: it asks the coordinator to bump the producer epoch at every
/// end (KIP-890 part 2), and the sink's identities are librdkafka's, which
/// ends its own transactions at version 1.
pub const END_TXN_VERSIONS: (i16, i16) = (0, 4);

fn end_txn_flexible(version: i16) -> bool {
    version >= 3
}

/// EndTxn at `version` (within [`END_TXN_VERSIONS`]) under the given
/// producer id and epoch; the broker's error code.
pub fn end_txn(
    conn: &mut Connection,
    version: i16,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
) -> Result<i16, WireError> {
    let body = end_txn_body(version, transactional_id, producer_id, producer_epoch, commit);
    let answer = conn.call(api::END_TXN, version, end_txn_flexible(version), &body)?;
    decode_end_txn(version, &answer)
}

pub fn end_txn_body(
    version: i16,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
) -> Vec<u8> {
    let flexible = end_txn_flexible(version);
    let mut body = Vec::new();
    if flexible {
        put_compact_string(&mut body, transactional_id);
    } else {
        put_string(&mut body, transactional_id);
    }
    body.extend_from_slice(&producer_id.to_be_bytes());
    body.extend_from_slice(&producer_epoch.to_be_bytes());
    body.push(u8::from(commit));
    if flexible {
        body.push(0); // no tagged fields
    }
    body
}

/// The error code of an EndTxn answer at `version` (the header already split off).
pub fn decode_end_txn(version: i16, body: &[u8]) -> Result<i16, WireError> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    let error = r.i16()?;
    if version >= 5 {
        let _producer_id = r.i64()?;
        let _producer_epoch = r.i16()?;
    }
    if end_txn_flexible(version) {
        r.skip_tags()?;
    }
    r.end()?;
    Ok(error)
}

/// One transaction as DescribeTransactions (v0) reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedTxn {
    pub error: i16,
    pub transactional_id: String,
    pub state: String,
    pub timeout_ms: i32,
    pub start_time_ms: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partitions: Vec<(String, Vec<i32>)>,
}

pub fn describe_transactions(conn: &mut Connection, transactional_id: &str) -> Result<Vec<DescribedTxn>, WireError> {
    let answer = conn.call(api::DESCRIBE_TRANSACTIONS, 0, true, &describe_transactions_body(transactional_id))?;
    decode_describe_transactions(&answer)
}

pub fn describe_transactions_body(transactional_id: &str) -> Vec<u8> {
    let mut body = Vec::new();
    put_uvarint(&mut body, 2); // one id
    put_compact_string(&mut body, transactional_id);
    body.push(0); // no tagged fields
    body
}

pub fn decode_describe_transactions(body: &[u8]) -> Result<Vec<DescribedTxn>, WireError> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    let n = r.compact_array_len(30)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let error = r.i16()?;
        let transactional_id = r.compact_string()?;
        let state = r.compact_string()?;
        let timeout_ms = r.i32()?;
        let start_time_ms = r.i64()?;
        let producer_id = r.i64()?;
        let producer_epoch = r.i16()?;
        let topics = r.compact_array_len(3)?;
        let mut partitions = Vec::with_capacity(topics);
        for _ in 0..topics {
            let topic = r.compact_string()?;
            let count = r.compact_array_len(4)?;
            let mut ids = Vec::with_capacity(count);
            for _ in 0..count {
                ids.push(r.i32()?);
            }
            r.skip_tags()?;
            partitions.push((topic, ids));
        }
        r.skip_tags()?;
        out.push(DescribedTxn {
            error,
            transactional_id,
            state,
            timeout_ms,
            start_time_ms,
            producer_id,
            producer_epoch,
            partitions,
        });
    }
    r.skip_tags()?;
    r.end()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn describe_answer(state: &str) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0i32.to_be_bytes());
        put_uvarint(&mut b, 2);
        b.extend_from_slice(&0i16.to_be_bytes());
        put_compact_string(&mut b, "job-1-sink-0");
        put_compact_string(&mut b, state);
        b.extend_from_slice(&60_000i32.to_be_bytes());
        b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        b.extend_from_slice(&4242i64.to_be_bytes());
        b.extend_from_slice(&7i16.to_be_bytes());
        put_uvarint(&mut b, 2);
        put_compact_string(&mut b, "out");
        put_uvarint(&mut b, 3);
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&3i32.to_be_bytes());
        b.push(0);
        b.push(0);
        b.push(0);
        b
    }

    #[test]
    fn a_described_transaction_is_read_field_by_field() {
        let got = decode_describe_transactions(&describe_answer("Ongoing")).unwrap();
        assert_eq!(
            got,
            [DescribedTxn {
                error: 0,
                transactional_id: "job-1-sink-0".into(),
                state: "Ongoing".into(),
                timeout_ms: 60_000,
                start_time_ms: 1_700_000_000_000,
                producer_id: 4242,
                producer_epoch: 7,
                partitions: vec![("out".into(), vec![0, 3])],
            }]
        );
    }

    #[test]
    fn a_truncated_or_padded_answer_is_refused() {
        let whole = describe_answer("CompleteCommit");
        for cut in 0..whole.len() {
            assert!(decode_describe_transactions(&whole[..cut]).is_err(), "cut at {cut} was accepted");
        }
        let mut padded = whole.clone();
        padded.push(0);
        assert!(decode_describe_transactions(&padded).is_err());
    }

    #[test]
    fn requests_are_framed_with_their_size_and_header() {
        let frame = request_frame(api::END_TXN, 1, 9, false, &end_txn_body(1, "t", 5, 2, false));
        let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(size, frame.len() - 4);
        assert_eq!(&frame[4..8], &[0, 26, 0, 1]);
        assert_eq!(&frame[8..12], &9i32.to_be_bytes());
        let flexible = request_frame(api::DESCRIBE_TRANSACTIONS, 0, 1, true, &[]);
        assert_eq!(flexible.last(), Some(&0), "a flexible header ends with its empty tag section");
    }

    /// The layouts of apache/kafka's EndTxnRequest.json and
    /// EndTxnResponse.json: fields 0+, flexible 3+, producer id and epoch
    /// in the answer from 5.
    #[test]
    fn end_txn_is_encoded_as_its_version_says() {
        let classic = end_txn_body(2, "tx", 5, 2, true);
        assert_eq!(classic, [&[0, 2][..], b"tx", &5i64.to_be_bytes(), &2i16.to_be_bytes(), &[1]].concat());
        let flexible = end_txn_body(3, "tx", 5, 2, false);
        assert_eq!(flexible, [&[3][..], b"tx", &5i64.to_be_bytes(), &2i16.to_be_bytes(), &[0], &[0]].concat());

        let answer = [&0i32.to_be_bytes()[..], &47i16.to_be_bytes()].concat();
        assert_eq!(decode_end_txn(1, &answer), Ok(47));
        assert!(decode_end_txn(3, &answer).is_err(), "a flexible answer ends with its tag section");
        let tagged = [&answer[..], &[0]].concat();
        assert_eq!(decode_end_txn(4, &tagged), Ok(47));
        assert!(decode_end_txn(1, &tagged).is_err(), "a classic answer has no tag section");
        let v5 = [&answer[..], &9i64.to_be_bytes(), &3i16.to_be_bytes(), &[0]].concat();
        assert_eq!(decode_end_txn(5, &v5), Ok(47));
    }

    #[test]
    fn an_answer_to_another_request_is_refused() {
        let mut answer = 8i32.to_be_bytes().to_vec();
        answer.extend_from_slice(&[0, 0]);
        assert!(split_response(&answer, 9, false).is_err());
        assert_eq!(split_response(&answer, 8, false).unwrap(), &[0, 0]);
    }

    proptest! {
        #[test]
        fn no_answer_makes_a_reader_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_describe_transactions(&bytes);
            let _ = decode_api_versions(&bytes);
            let _ = decode_find_coordinator(&bytes);
            let _ = decode_end_txn(1, &bytes);
            let _ = decode_end_txn(3, &bytes);
            let _ = split_response(&bytes, 1, true);
        }

        #[test]
        fn varints_round_trip(v in any::<u64>()) {
            let mut b = Vec::new();
            put_uvarint(&mut b, v);
            let mut r = Reader::new(&b);
            prop_assert_eq!(r.uvarint().unwrap(), v);
            prop_assert!(r.end().is_ok());
        }
    }
}
