package dev.clink.peers.flink;

import java.util.concurrent.atomic.AtomicLong;

/**
 * The peer's own measure of its steady state: the events its source read,
 * and the time from the first to the last of them (no JVM or cluster start,
 * no job submission, no teardown).
 */
final class Rate {
    private final AtomicLong count = new AtomicLong();
    private final AtomicLong first = new AtomicLong();
    private final AtomicLong last = new AtomicLong();

    void record() {
        long now = System.nanoTime();
        if (count.getAndIncrement() == 0) {
            first.set(now);
        }
        last.set(now);
    }

    long count() {
        return count.get();
    }

    double seconds() {
        return (last.get() - first.get()) / 1e9;
    }
}
