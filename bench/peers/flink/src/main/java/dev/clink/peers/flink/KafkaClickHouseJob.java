package dev.clink.peers.flink;

import java.math.BigDecimal;
import java.time.Duration;
import java.util.Map;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.FilterFunction;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.jdbc.JdbcConnectionOptions;
import org.apache.flink.connector.jdbc.JdbcExecutionOptions;
import org.apache.flink.connector.jdbc.core.datastream.sink.JdbcSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.formats.json.JsonDeserializationSchema;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * The Kafka→ClickHouse records job (fixtures/jobs/kafka-clickhouse) on
 * Apache Flink: a KafkaSource over every partition of the topic
 * {@code clink produce} wrote (read_committed, bounded by the offsets at
 * start, as our {@code "end": "offsets_at_start"}), the JSON events as a
 * POJO, the credits kept ({@code amount > 0}), keyed by account to two sink
 * subtasks, and Flink's JDBC sink (flink-connector-jdbc with ClickHouse's
 * JDBC driver) inserting {@code (id, account, amount, time)}: at least once,
 * as our clickhouse_sink is, batches flushed at every checkpoint.
 *
 * <p>Usage: KafkaClickHouseJob --bootstrap HOST:PORT --topic T --clickhouse
 * HOST:PORT --table NAME --checkpoint-dir DIR --checkpoint-interval-ms N
 * --state-backend hashmap|rocksdb [--parallelism 2] [--batch-rows 10000]
 */
public final class KafkaClickHouseJob {
    private KafkaClickHouseJob() {}

    /** One message {@code clink produce} wrote. */
    public static final class Event {
        public long id;
        public long time;
        public String account;
        public BigDecimal amount;

        public Event() {}
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = Args.parse(argv);
        String bootstrap = Args.required(args, "bootstrap");
        String topic = Args.required(args, "topic");
        String clickhouse = Args.required(args, "clickhouse");
        String table = Args.required(args, "table");
        if (!table.matches("[A-Za-z0-9_]+")) {
            throw new IllegalArgumentException("--table is a plain name, not " + table);
        }
        long interval = Long.parseLong(Args.required(args, "checkpoint-interval-ms"));
        int parallelism = Integer.parseInt(args.getOrDefault("parallelism", "2"));
        int batchRows = Integer.parseInt(args.getOrDefault("batch-rows", "10000"));

        Configuration conf = Peer.configuration(args);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);
        env.enableCheckpointing(interval, CheckpointingMode.EXACTLY_ONCE);

        KafkaSource<Event> source = KafkaSource.<Event>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(topic)
                .setGroupId("clink-flink-peer-" + table)
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setBounded(OffsetsInitializer.latest())
                .setProperty("isolation.level", "read_committed")
                .setValueOnlyDeserializer(new JsonDeserializationSchema<>(Event.class))
                .build();
        JdbcSink<Event> sink = JdbcSink.<Event>builder()
                .withQueryStatement(
                        "INSERT INTO `" + table + "` (id, account, amount, time) VALUES (?, ?, ?, ?)",
                        (statement, e) -> {
                            statement.setLong(1, e.id);
                            statement.setString(2, e.account);
                            statement.setBigDecimal(3, e.amount);
                            statement.setLong(4, e.time);
                        })
                .withExecutionOptions(JdbcExecutionOptions.builder()
                        .withBatchSize(batchRows)
                        .withMaxRetries(3)
                        .build())
                .buildAtLeastOnce(new JdbcConnectionOptions.JdbcConnectionOptionsBuilder()
                        .withUrl("jdbc:clickhouse://" + clickhouse + "/default")
                        .withDriverName("com.clickhouse.jdbc.ClickHouseDriver")
                        .withUsername("default")
                        .build());

        env.fromSource(
                        source,
                        WatermarkStrategy.<Event>forBoundedOutOfOrderness(Duration.ofSeconds(2))
                                .withTimestampAssigner((e, previous) -> e.time),
                        "events")
                .setParallelism(1)
                .uid("events")
                .filter(new Credits())
                .setParallelism(1)
                .uid("credits")
                .keyBy(e -> e.account)
                .sinkTo(sink)
                .uid("credits-out");

        JobExecutionResult result = env.execute("clink kafka-clickhouse job (Flink peer)");
        Peer.report("flink", "kafka-clickhouse", result, Credits.COUNTER);
    }

    /** amount > 0; counts every event it is handed (the steady-state rate). */
    static final class Credits implements FilterFunction<Event>, CheckpointListener {
        static final Rate COUNTER = new Rate();

        @Override
        public boolean filter(Event e) {
            COUNTER.record();
            return e.amount.signum() > 0;
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            Peer.checkpointCompleted(checkpointId);
        }
    }
}
