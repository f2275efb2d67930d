package dev.clink.peers.flink;

import java.io.File;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.StateBackendOptions;

/** What every Flink peer job shares: its settings and the line it prints at the end. */
final class Peer {
    private Peer() {}

    /** The highest checkpoint id any operator was told completed (the jobs run in this JVM's MiniCluster). */
    private static final AtomicLong CHECKPOINTS = new AtomicLong();

    static void checkpointCompleted(long id) {
        CHECKPOINTS.accumulateAndGet(id, Math::max);
    }

    /**
     * The state backend (hashmap or rocksdb), checkpoints to files under
     * --checkpoint-dir, and Flink's working files (RocksDB's among them)
     * beside them, on the disk our engine writes its checkpoints to.
     */
    static Configuration configuration(Map<String, String> args) {
        String backend = args.getOrDefault("state-backend", "hashmap");
        if (!backend.equals("hashmap") && !backend.equals("rocksdb")) {
            throw new IllegalArgumentException("--state-backend is hashmap or rocksdb, not " + backend);
        }
        File dir = new File(Args.required(args, "checkpoint-dir")).getAbsoluteFile();
        File work = new File(dir, "tmp");
        if (!work.mkdirs() && !work.isDirectory()) {
            throw new IllegalStateException("cannot create " + work);
        }
        Configuration conf = new Configuration();
        conf.set(StateBackendOptions.STATE_BACKEND, backend);
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, dir.toURI().toString());
        conf.set(CoreOptions.TMP_DIRS, work.getPath());
        return conf;
    }

    /** One JSON line on stdout: what the bench reads. */
    static void report(String peer, String job, JobExecutionResult result, Rate rate) {
        long events = rate.count();
        double span = rate.seconds();
        System.out.printf(
                "{\"peer\":\"%s\",\"job\":\"%s\",\"events\":%d,\"steady_seconds\":%.6f,\"steady_events_per_s\":%.1f,"
                        + "\"net_runtime_ms\":%d,\"checkpoints\":%d}%n",
                peer,
                job,
                events,
                span,
                span > 0 ? events / span : 0.0,
                result.getNetRuntime(),
                CHECKPOINTS.get());
    }
}
