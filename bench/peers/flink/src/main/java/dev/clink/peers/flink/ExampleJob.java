package dev.clink.peers.flink;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.api.common.serialization.SimpleStringEncoder;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.sink.FileSink;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.FileSourceSplit;
import org.apache.flink.connector.file.src.assigners.FileSplitAssigner;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.filesystem.bucketassigners.BasePathBucketAssigner;
import org.apache.flink.streaming.api.functions.sink.filesystem.rollingpolicies.OnCheckpointRollingPolicy;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * The example job (fixtures/jobs/example) on Apache Flink's DataStream API:
 * our segment files read in order by a FileSource, the watermarks the input
 * carries, a 10 s event-time tumbling window per account (count and sum),
 * a keyed process function for the 30 s idle detector, and each result
 * written by a FileSink (exactly once: files committed at checkpoints).
 *
 * <p>Our semantics, made Flink's (see bench/peers/README.md):
 *
 * <ul>
 *   <li>Watermarks are the input's {@code W,t} lines (a punctuated
 *       {@link WatermarkGenerator}), not a periodic bounded-out-of-orderness
 *       guess: the input already is bounded out of order by 2 s, and its W
 *       lines are exactly that bound, so both engines see the same
 *       watermarks at the same records.
 *   <li>Our {@code W,t} says no event before t follows (a window [s, e)
 *       fires once t &ge; e; an event is late when its window's end &le; t).
 *       Flink's {@code Watermark(t)} says none at or before t (a window
 *       fires once t &ge; e - 1). So {@code W,t} becomes {@code Watermark(t -
 *       1)}: the same windows fire at the same line, and the same events are
 *       late (none, in the generated inputs).
 *   <li>The idle timer of an account last seen at s is due when our
 *       watermark reaches s + 30 s; with the shifted watermark that is a
 *       Flink event-time timer at s + 30 s - 1.
 *   <li>{@code END} is the end of the bounded input, where Flink sends the
 *       final watermark (Long.MAX_VALUE): every window and timer fires, as
 *       our END does.
 * </ul>
 *
 * <p>Usage: ExampleJob --input DIR --output DIR --checkpoint-dir DIR
 * --checkpoint-interval-ms N --state-backend hashmap|rocksdb [--parallelism 2]
 *
 * <p>Prints one JSON line: events read, the span from the first record read
 * to the last (the steady-state rate), Flink's own net runtime, and the
 * highest checkpoint id completed.
 */
public final class ExampleJob {
    private ExampleJob() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = Args.parse(argv);
        String input = Args.required(args, "input");
        String output = Args.required(args, "output");
        long interval = Long.parseLong(Args.required(args, "checkpoint-interval-ms"));
        int parallelism = Integer.parseInt(args.getOrDefault("parallelism", "2"));

        Configuration conf = Peer.configuration(args);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);
        env.enableCheckpointing(interval, CheckpointingMode.EXACTLY_ONCE);

        FileSource<String> segments = FileSource.forRecordStreamFormat(new TextLineInputFormat(), new Path(input))
                .setSplitAssigner(InOrder::new)
                .build();
        DataStream<Line> lines = env.fromSource(segments, WatermarkStrategy.noWatermarks(), "segments")
                .setParallelism(1)
                .uid("source")
                .flatMap(new Parse())
                .setParallelism(1)
                .uid("parse")
                .assignTimestampsAndWatermarks(WatermarkStrategy.<Line>forGenerator(ctx -> new InputWatermarks())
                        .withTimestampAssigner((line, previous) -> line.time))
                .setParallelism(1)
                .uid("watermarks")
                .filter(line -> !line.watermark)
                .setParallelism(1)
                .uid("events");
        KeyedStream<Line, String> byAccount = lines.keyBy(line -> line.account);

        byAccount.window(TumblingEventTimeWindows.of(Duration.ofSeconds(10)))
                .aggregate(new Sum(), new Render())
                .uid("windows")
                .sinkTo(sink(output + "/windows-out"))
                .uid("windows-out");
        byAccount.process(new Idle(30_000L)).uid("idle").sinkTo(sink(output + "/idle-out")).uid("idle-out");

        JobExecutionResult result = env.execute("clink example job (Flink peer)");
        Peer.report("flink", "example", result, Parse.COUNTER);
    }

    /** A FileSink into DIR itself (no date buckets), committing what it wrote at every checkpoint. */
    static FileSink<String> sink(String dir) {
        return FileSink.forRowFormat(new Path(dir), new SimpleStringEncoder<String>("UTF-8"))
                .withBucketAssigner(new BasePathBucketAssigner<>())
                .withRollingPolicy(OnCheckpointRollingPolicy.build())
                .build();
    }

    /** One input line: an event, or a watermark (then only {@code time} is set). */
    public static final class Line {
        public String account;
        public long time;
        public long cents;
        public boolean watermark;

        public Line() {}
    }

    /** The sum of one window so far. */
    public static final class Acc {
        public long count;
        public long cents;

        public Acc() {}
    }

    /** E,t,account,amount and W,t lines into {@link Line}s; END (and nothing else) is skipped. */
    static final class Parse implements FlatMapFunction<String, Line> {
        static final Rate COUNTER = new Rate();

        @Override
        public void flatMap(String text, Collector<Line> out) {
            if (text.startsWith("E,")) {
                int a = text.indexOf(',', 2);
                int b = text.indexOf(',', a + 1);
                Line line = new Line();
                line.time = Long.parseLong(text.substring(2, a));
                line.account = text.substring(a + 1, b);
                line.cents = Cents.parse(text.substring(b + 1));
                COUNTER.record();
                out.collect(line);
            } else if (text.startsWith("W,")) {
                Line line = new Line();
                line.time = Long.parseLong(text.substring(2));
                line.watermark = true;
                out.collect(line);
            } else if (!text.equals("END")) {
                throw new IllegalArgumentException("an input line that is not E, W or END: " + text);
            }
        }
    }

    /** The input's own watermarks: W,t becomes Flink's Watermark(t - 1), at that line. */
    static final class InputWatermarks implements WatermarkGenerator<Line> {
        @Override
        public void onEvent(Line line, long timestamp, WatermarkOutput output) {
            if (line.watermark) {
                output.emitWatermark(new Watermark(line.time - 1));
            }
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput output) {}
    }

    static final class Sum implements AggregateFunction<Line, Acc, Acc> {
        @Override
        public Acc createAccumulator() {
            return new Acc();
        }

        @Override
        public Acc add(Line line, Acc acc) {
            acc.count += 1;
            acc.cents += line.cents;
            return acc;
        }

        @Override
        public Acc getResult(Acc acc) {
            return acc;
        }

        @Override
        public Acc merge(Acc a, Acc b) {
            a.count += b.count;
            a.cents += b.cents;
            return a;
        }
    }

    /** account,window_start,window_end,count,sum */
    static final class Render extends ProcessWindowFunction<Acc, String, String, TimeWindow> {
        @Override
        public void process(String account, Context context, Iterable<Acc> sums, Collector<String> out) {
            Acc acc = sums.iterator().next();
            TimeWindow w = context.window();
            out.collect(account + "," + w.getStart() + "," + w.getEnd() + "," + acc.count + "," + Cents.render(acc.cents));
        }
    }

    /**
     * The idle detector: an account whose newest event time s is not
     * followed by a newer one before the watermark passes s + timeout is
     * reported once, {@code account,last_seen,idle_count}.
     */
    static final class Idle extends KeyedProcessFunction<String, Line, String> implements CheckpointListener {
        private final long timeout;
        private transient ValueState<Long> lastSeen;
        private transient ValueState<Long> idleCount;

        Idle(long timeout) {
            this.timeout = timeout;
        }

        @Override
        public void open(OpenContext context) {
            lastSeen = getRuntimeContext().getState(new ValueStateDescriptor<>("last_seen", Long.class));
            idleCount = getRuntimeContext().getState(new ValueStateDescriptor<>("idle_count", Long.class));
        }

        @Override
        public void processElement(Line line, Context ctx, Collector<String> out) throws Exception {
            Long seen = lastSeen.value();
            if (seen == null || line.time > seen) {
                lastSeen.update(line.time);
                ctx.timerService().registerEventTimeTimer(line.time + timeout - 1);
            }
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<String> out) throws Exception {
            long seen = lastSeen.value();
            if (seen + timeout - 1 == timestamp) {
                Long n = idleCount.value();
                long next = (n == null ? 0 : n) + 1;
                idleCount.update(next);
                out.collect(ctx.getCurrentKey() + "," + seen + "," + next);
            }
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            Peer.checkpointCompleted(checkpointId);
        }
    }

    /** Hands out the segment files in name order, one at a time (the reader asks for the next when done). */
    static final class InOrder implements FileSplitAssigner {
        private final List<FileSourceSplit> splits;

        InOrder(Collection<FileSourceSplit> initial) {
            splits = new ArrayList<>(initial);
            sort();
        }

        private void sort() {
            splits.sort(Comparator.comparing((FileSourceSplit s) -> s.path().toString()).thenComparing(FileSourceSplit::offset));
        }

        @Override
        public Optional<FileSourceSplit> getNext(String hostname) {
            return splits.isEmpty() ? Optional.empty() : Optional.of(splits.remove(0));
        }

        @Override
        public void addSplits(Collection<FileSourceSplit> more) {
            splits.addAll(more);
            sort();
        }

        @Override
        public Collection<FileSourceSplit> remainingSplits() {
            return new ArrayList<>(splits);
        }
    }
}
