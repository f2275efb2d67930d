package dev.clink.peers.kstreams;

import java.io.IOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The Kafka→Kafka exactly-once job (fixtures/jobs/kafka-kafka) on Kafka
 * Streams with {@code processing.guarantee=exactly_once_v2}: the events
 * {@code clink produce} wrote (already keyed by account, so no repartition),
 * a 10 s tumbling window per account (count and sum) kept in a window store,
 * each window written once, when it closes, as our line
 * {@code account,window_start,window_end,count,sum} keyed by account.
 *
 * <p>Written on the Processor API (a processor with a window store, as the
 * Kafka Streams documentation writes a stateful aggregation by hand) rather
 * than {@code windowedBy(...).aggregate(...).suppress(untilWindowCloses)},
 * because our job's input ends: its source reads to the offsets it found at
 * start and then fires every open window, while the DSL only closes a window
 * when stream time passes it, so the DSL would never emit the last windows
 * of a bounded input. Our semantics, made Kafka Streams' (see
 * bench/peers/README.md):
 *
 * <ul>
 *   <li>The watermark is the greatest event time seen less 2 s (our
 *       {@code watermark_lag_ms}), per task (a task is one input partition,
 *       and every account lives in one partition); a window [s, e) fires
 *       once the watermark reaches e, an event whose window end is at or
 *       below it is late and dropped. Ours takes the least over the
 *       partitions; in the generated input no event is late under either
 *       rule, so both emit the same windows.
 *   <li>The end: the main thread reads each partition's end offset
 *       (read_committed) before it starts the application; a task that
 *       processes its partition's last record fires every window it holds,
 *       as our END does.
 * </ul>
 *
 * <p>Usage: KafkaKafkaJob --bootstrap HOST:PORT --input T --output T
 * --application-id ID --state-dir DIR [--commit-interval-ms 100]
 * [--threads 2] [--store rocksdb|memory]. It stops once the application's
 * committed offsets reach those ends, and prints one JSON line.
 */
public final class KafkaKafkaJob {
    private KafkaKafkaJob() {}

    static final long WINDOW_MS = 10_000;
    static final long LAG_MS = 2_000;
    static final String WINDOWS = "windows";
    static final String FIRED = "fired";
    /** How long a window store keeps a window it was not told to forget (ours are forgotten once emitted). */
    static final Duration RETENTION = Duration.ofMinutes(10);

    /** One message {@code clink produce} wrote. */
    public static final class Event {
        public long id;
        public long time;
        public String account;
        public BigDecimal amount;

        public Event() {}
    }

    /** Every event read, and the time from the first to the last (the steady-state rate). */
    static final AtomicLong EVENTS = new AtomicLong();
    static final AtomicLong FIRST_NANOS = new AtomicLong(Long.MAX_VALUE);
    static final AtomicLong LAST_NANOS = new AtomicLong();

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        String bootstrap = required(args, "bootstrap");
        String input = required(args, "input");
        String output = required(args, "output");
        String applicationId = required(args, "application-id");
        String store = args.getOrDefault("store", "rocksdb");

        Map<Integer, Long> ends = endOffsets(bootstrap, input);

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args.getOrDefault("commit-interval-ms", "100"));
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, args.getOrDefault("threads", "2"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, required(args, "state-dir"));
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

        StreamsBuilder builder = new StreamsBuilder();
        builder.addStateStore(Stores.windowStoreBuilder(
                        store.equals("memory")
                                ? Stores.inMemoryWindowStore(WINDOWS, RETENTION, Duration.ofMillis(WINDOW_MS), false)
                                : Stores.persistentWindowStore(WINDOWS, RETENTION, Duration.ofMillis(WINDOW_MS), false),
                        Serdes.String(),
                        new AccSerde())
                // The generated events are from 2023 and a window store's changelog is
                // compact,delete with a retention of a day by event time: kept whole
                // here, or a restore would find the broker had deleted it.
                .withLoggingEnabled(Map.of("retention.ms", "-1")));
        builder.addStateStore(Stores.keyValueStoreBuilder(
                store.equals("memory") ? Stores.inMemoryKeyValueStore(FIRED) : Stores.persistentKeyValueStore(FIRED),
                Serdes.Integer(),
                Serdes.Long()));
        builder.stream(input, Consumed.with(Serdes.String(), new JsonSerde()).withTimestampExtractor(new EventTime()))
                .process(() -> new Windows(ends), WINDOWS, FIRED)
                .to(output, Produced.with(Serdes.String(), Serdes.String()));

        long started = System.nanoTime();
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            System.exit(1);
            return null;
        });
        streams.start();
        awaitCommitted(bootstrap, applicationId, input, ends, started);
        double commits = 0;
        for (Map.Entry<MetricName, ? extends Metric> m : streams.metrics().entrySet()) {
            if (m.getKey().name().equals("commit-total") && m.getKey().group().equals("stream-thread-metrics")) {
                commits += ((Number) m.getValue().metricValue()).doubleValue();
            }
        }
        streams.close(Duration.ofSeconds(60));
        long events = EVENTS.get();
        double span = events == 0 ? 0 : (LAST_NANOS.get() - FIRST_NANOS.get()) / 1e9;
        System.out.printf(
                "{\"peer\":\"kafka-streams\",\"job\":\"kafka-kafka\",\"events\":%d,\"steady_seconds\":%.6f,"
                        + "\"steady_events_per_s\":%.1f,\"net_runtime_ms\":%d,\"checkpoints\":%.0f}%n",
                events,
                span,
                span > 0 ? events / span : 0.0,
                TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started),
                commits);
    }

    static String required(Map<String, String> args, String name) {
        String v = args.get(name);
        if (v == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }

    /** Each partition's end offset as a read_committed reader sees it now (our "end": "offsets_at_start"). */
    static Map<Integer, Long> endOffsets(String bootstrap, String topic) throws Exception {
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            int partitions = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
            Map<TopicPartition, OffsetSpec> ask = new HashMap<>();
            for (int p = 0; p < partitions; p++) {
                ask.put(new TopicPartition(topic, p), OffsetSpec.latest());
            }
            return admin.listOffsets(ask, new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).all().get().entrySet().stream()
                    .collect(Collectors.toMap(e -> e.getKey().partition(), e -> e.getValue().offset()));
        }
    }

    /** Waits until the application's committed offsets reach every end (an hour at most). */
    static void awaitCommitted(String bootstrap, String group, String topic, Map<Integer, Long> ends, long started)
            throws Exception {
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            while (true) {
                Map<TopicPartition, OffsetAndMetadata> committed =
                        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                boolean done = true;
                for (Map.Entry<Integer, Long> end : ends.entrySet()) {
                    OffsetAndMetadata at = committed.get(new TopicPartition(topic, end.getKey()));
                    long offset = at == null ? 0 : at.offset();
                    done &= offset >= end.getValue();
                }
                if (done) {
                    return;
                }
                if (System.nanoTime() - started > TimeUnit.HOURS.toNanos(1)) {
                    throw new IllegalStateException("the input was not committed within an hour");
                }
                Thread.sleep(20);
            }
        }
    }

    /** The event time is the message's {@code time}. */
    static final class EventTime implements TimestampExtractor {
        @Override
        public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            return ((Event) record.value()).time;
        }
    }

    /** The windows of one task (one input partition). */
    static final class Windows implements Processor<String, Event, String, String> {
        private final Map<Integer, Long> ends;
        private ProcessorContext<String, String> context;
        private WindowStore<String, long[]> windows;
        private KeyValueStore<Integer, Long> fired;
        /** The greatest event time seen less the lag (in memory: after a restore it starts again, and nothing is late then). */
        private long watermark = Long.MIN_VALUE;
        /** Every window ending at or before this has been emitted (kept in a store, so a restore does not emit one twice). */
        private long firedUpTo = Long.MIN_VALUE;

        Windows(Map<Integer, Long> ends) {
            this.ends = ends;
        }

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.context = context;
            this.windows = context.getStateStore(WINDOWS);
            this.fired = context.getStateStore(FIRED);
            Long f = fired.get(0);
            firedUpTo = f == null ? Long.MIN_VALUE : f;
        }

        @Override
        public void process(Record<String, Event> record) {
            long now = System.nanoTime();
            EVENTS.incrementAndGet();
            FIRST_NANOS.accumulateAndGet(now, Math::min);
            LAST_NANOS.accumulateAndGet(now, Math::max);
            Event e = record.value();
            long start = Math.floorDiv(e.time, WINDOW_MS) * WINDOW_MS;
            if (start + WINDOW_MS > firedUpTo) {
                long[] acc = windows.fetch(e.account, start);
                long cents = e.amount.movePointRight(2).longValueExact();
                windows.put(e.account, acc == null ? new long[] {1, cents} : new long[] {acc[0] + 1, acc[1] + cents}, start);
            }
            watermark = Math.max(watermark, e.time - LAG_MS);
            RecordMetadata at = context.recordMetadata().orElseThrow();
            Long end = ends.get(at.partition());
            if (end != null && at.offset() + 1 >= end) {
                fire(Long.MAX_VALUE);
            } else if (watermark != Long.MIN_VALUE) {
                fire(Math.floorDiv(watermark, WINDOW_MS) * WINDOW_MS);
            }
        }

        /** Emits and forgets every window ending at or before {@code upTo}. */
        private void fire(long upTo) {
            if (upTo <= firedUpTo) {
                return;
            }
            long from = firedUpTo == Long.MIN_VALUE ? 0 : firedUpTo;
            long to = upTo == Long.MAX_VALUE ? Long.MAX_VALUE - WINDOW_MS : upTo - WINDOW_MS;
            List<KeyValue<Windowed<String>, long[]>> due = new java.util.ArrayList<>();
            try (KeyValueIterator<Windowed<String>, long[]> it = windows.fetchAll(from, to)) {
                it.forEachRemaining(due::add);
            }
            for (KeyValue<Windowed<String>, long[]> w : due) {
                long start = w.key.window().start();
                String account = w.key.key();
                String line = account + "," + start + "," + (start + WINDOW_MS) + "," + w.value[0] + "," + render(w.value[1]);
                context.forward(new Record<>(account, line, start + WINDOW_MS - 1));
                windows.put(account, null, start);
            }
            firedUpTo = upTo;
            fired.put(0, upTo);
        }
    }

    static String render(long cents) {
        long abs = Math.abs(cents);
        String frac = Long.toString(abs % 100);
        return (cents < 0 ? "-" : "") + (abs / 100) + "." + (frac.length() == 1 ? "0" + frac : frac);
    }

    /** A window's count and sum in cents, as 16 bytes. */
    static final class AccSerde implements Serde<long[]> {
        @Override
        public Serializer<long[]> serializer() {
            return (topic, acc) -> acc == null ? null : ByteBuffer.allocate(16).putLong(acc[0]).putLong(acc[1]).array();
        }

        @Override
        public Deserializer<long[]> deserializer() {
            return (topic, bytes) -> {
                if (bytes == null) {
                    return null;
                }
                ByteBuffer b = ByteBuffer.wrap(bytes);
                return new long[] {b.getLong(), b.getLong()};
            };
        }
    }

    /** The events as JSON, through Jackson. */
    static final class JsonSerde implements Serde<Event> {
        private static final ObjectMapper MAPPER =
                new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, true);

        @Override
        public Serializer<Event> serializer() {
            return (topic, e) -> {
                try {
                    return MAPPER.writeValueAsBytes(e);
                } catch (IOException x) {
                    throw new IllegalStateException(x);
                }
            };
        }

        @Override
        public Deserializer<Event> deserializer() {
            return (topic, bytes) -> {
                try {
                    return MAPPER.readValue(bytes, Event.class);
                } catch (IOException x) {
                    throw new IllegalArgumentException("a message that is not an event: " + x.getMessage(), x);
                }
            };
        }
    }
}
