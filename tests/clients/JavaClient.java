// The Apache Kafka Java client (kafka-clients 3.9.2 as `java:`, 4.1.1 as
// `java4:`, compiled against each), driven from the Rust
// integration tests like the Python scripts beside it: the same flags and
// the same JSON shapes (see README.md), one JSON object on the last stdout
// line; exit 0 done, 1 fell short (JSON still printed), 2 bad arguments,
// 3 crash.
//
//   JavaClient produce --bootstrap B --topic T --count N [--start S]
//       [--compression none|gzip|snappy|lz4|zstd] [--acks 0|1|all]
//       [--idempotent | --no-idempotent] [--keyed] [--partition P]
//       [--linger-ms MS] [--timestamp-base MS [--timestamp-step MS]]
//       [--rate R] [--timeout S] [-X key=value ...]
//   JavaClient consume --bootstrap B --topic T --expect N
//       (--group G [--members M] [--commit] | --assign)
//       [--linger S] [--records] [--timeout S] [-X key=value ...]
//   JavaClient admin --bootstrap B create|describe|delete|offsets
//       [--topic T] [--partitions P] [--replication-factor R]
//       [--timestamp MS] [--allow-error]
//   JavaClient txn --bootstrap B --topic T [--transactions N] [--per N]
//       [--txn-id ID] [-X key=value ...]
//   JavaClient lagpoll --bootstrap B [--interval S] [--seconds S]
//       [--warmup S] [-X key=value ...]
//
// lagpoll polls every consumer group's lag as a lag exporter does (the
// benchmark's comparison, scripts/bench-lag); prints {"polls",
// "measured_polls", "groups", "partitions", "lag", "cpu_seconds",
// "measured_seconds", "rss_bytes", "error"}.
//
// txn is ck_txn.py with the Java client's transactional producer:
// transaction t holds values 'jtxn{t}-{i}' (key 'k{i % 4}'), committed when
// t is even, aborted when odd; prints {"committed", "aborted",
// "committed_values", "error"}.
//
// produce --rate sends at most R records a second (for runs that must
// last while a broker fails); --timestamp-base gives record i (counted from --start) the
// timestamp base + i * step (default step 1000); admin offsets --timestamp
// adds "at": {"p": offset} (ListOffsets by timestamp, -1 when none).
//
// Without --idempotent / --no-idempotent the producer keeps Java's own
// default: idempotent whenever acks=all. produce --topic takes a
// comma-separated list (record i goes to topic (i - start) % n; the JSON
// adds "topics": {T: delivered}), for one producer writing to several.
//
// The harness (tests/support) compiles this file once per test process
// against the jars `scripts/peers` puts in .peers/java/.

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaClient {
    // --- arguments -----------------------------------------------------------

    static final class Args {
        final Map<String, String> values = new HashMap<>();
        final Set<String> flags = new HashSet<>();
        final List<String> positional = new ArrayList<>();
        final Properties extra = new Properties();

        Args(String[] argv, int from, Set<String> flagNames) {
            for (int i = from; i < argv.length; i++) {
                String a = argv[i];
                if (a.equals("-X")) {
                    String kv = need(argv, ++i, a);
                    int eq = kv.indexOf('=');
                    if (eq < 0) usage("bad -X option " + kv + ": expected key=value");
                    extra.setProperty(kv.substring(0, eq), kv.substring(eq + 1));
                } else if (flagNames.contains(a)) {
                    flags.add(a);
                } else if (a.startsWith("--")) {
                    values.put(a, need(argv, ++i, a));
                } else {
                    positional.add(a);
                }
            }
        }

        static String need(String[] argv, int i, String name) {
            if (i >= argv.length) usage(name + " needs a value");
            return argv[i];
        }

        String get(String name) {
            String v = values.get(name);
            if (v == null) usage(name + " is required");
            return v;
        }

        String get(String name, String dflt) {
            return values.getOrDefault(name, dflt);
        }

        long num(String name, long dflt) {
            String v = values.get(name);
            if (v == null) return dflt;
            try {
                return Long.parseLong(v);
            } catch (NumberFormatException e) {
                usage(name + ": not a number: " + v);
                return 0;
            }
        }

        double secs(String name, double dflt) {
            String v = values.get(name);
            if (v == null) return dflt;
            try {
                return Double.parseDouble(v);
            } catch (NumberFormatException e) {
                usage(name + ": not a number: " + v);
                return 0;
            }
        }

        boolean has(String flag) {
            return flags.contains(flag);
        }
    }

    static void usage(String why) {
        System.err.println("JavaClient: " + why);
        System.exit(2);
    }

    // --- JSON output ---------------------------------------------------------

    static String json(Object v) {
        StringBuilder b = new StringBuilder();
        write(b, v);
        return b.toString();
    }

    @SuppressWarnings("unchecked")
    static void write(StringBuilder b, Object v) {
        if (v == null) {
            b.append("null");
        } else if (v instanceof String) {
            b.append('"');
            for (char c : ((String) v).toCharArray()) {
                switch (c) {
                    case '"': b.append("\\\""); break;
                    case '\\': b.append("\\\\"); break;
                    case '\n': b.append("\\n"); break;
                    case '\r': b.append("\\r"); break;
                    case '\t': b.append("\\t"); break;
                    default:
                        if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                        else b.append(c);
                }
            }
            b.append('"');
        } else if (v instanceof Number || v instanceof Boolean) {
            b.append(v);
        } else if (v instanceof Map) {
            b.append('{');
            boolean first = true;
            for (Map.Entry<Object, Object> e : new TreeMap<>((Map<Object, Object>) v).entrySet()) {
                if (!first) b.append(", ");
                first = false;
                write(b, String.valueOf(e.getKey()));
                b.append(": ");
                write(b, e.getValue());
            }
            b.append('}');
        } else if (v instanceof Collection) {
            b.append('[');
            boolean first = true;
            for (Object o : (Collection<Object>) v) {
                if (!first) b.append(", ");
                first = false;
                write(b, o);
            }
            b.append(']');
        } else {
            write(b, v.toString());
        }
    }

    static void emit(Map<String, Object> result, boolean ok, String message) {
        if (message != null) System.err.println(message);
        System.out.println(json(result));
        System.out.flush();
        System.exit(ok ? 0 : 1);
    }

    // --- shared helpers --------------------------------------------------------

    static String valueFor(String prefix, long i, int size) {
        StringBuilder v = new StringBuilder(prefix + "-" + i);
        while (v.length() < size) v.append('.');
        return v.toString();
    }

    static String valuesSha(Collection<String> values) throws Exception {
        TreeSet<String> sorted = new TreeSet<>(values);
        MessageDigest d = MessageDigest.getInstance("SHA-256");
        d.update(String.join("\n", sorted).getBytes(StandardCharsets.UTF_8));
        StringBuilder hex = new StringBuilder();
        for (byte x : d.digest()) hex.append(String.format("%02x", x));
        return hex.toString();
    }

    /** "NAME: message" with Kafka's error name, like the Python scripts. */
    static String errText(Throwable e) {
        Throwable t = e;
        while ((t instanceof ExecutionException || t instanceof CompletionException) && t.getCause() != null) {
            t = t.getCause();
        }
        Errors code = Errors.forException(t);
        String name = code == Errors.UNKNOWN_SERVER_ERROR ? t.getClass().getSimpleName() : code.name();
        return name + ": " + t.getMessage();
    }

    static void addOffset(Map<String, List<Long>> offsets, int partition, long offset) {
        offsets.compute(String.valueOf(partition), (k, lo_hi) -> {
            if (lo_hi == null) return new ArrayList<>(List.of(offset, offset));
            lo_hi.set(0, Math.min(lo_hi.get(0), offset));
            lo_hi.set(1, Math.max(lo_hi.get(1), offset));
            return lo_hi;
        });
    }

    // --- produce ---------------------------------------------------------------

    static void produce(Args a, long t0) throws Exception {
        // A comma-separated list: record i goes to the (i - start) % n-th.
        String[] topicList = a.get("--topic").split(",");
        long count = a.num("--count", -1);
        if (count < 0) usage("--count is required");
        long start = a.num("--start", 0);
        String compression = a.get("--compression", "none");
        double timeout = a.secs("--timeout", 60);
        String prefix = a.get("--value-prefix", compression);
        int size = (int) a.num("--value-size", 0);
        boolean stamped = a.values.containsKey("--timestamp-base");
        long tsBase = a.num("--timestamp-base", 0);
        long tsStep = a.num("--timestamp-step", 1000);
        long rate = a.num("--rate", 0);

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("--bootstrap"));
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "java_produce");
        p.put(ProducerConfig.ACKS_CONFIG, a.get("--acks", "all"));
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        p.put(ProducerConfig.LINGER_MS_CONFIG, (int) a.num("--linger-ms", 5));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, (int) (timeout * 1000));
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, Math.min(30000, (int) (timeout * 1000)));
        if (a.has("--idempotent")) p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        if (a.has("--no-idempotent")) p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
        p.putAll(a.extra);

        List<String> errors = Collections.synchronizedList(new ArrayList<>());
        List<Object[]> delivered = Collections.synchronizedList(new ArrayList<>());
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            long began = System.nanoTime();
            for (long i = start; i < start + count; i++) {
                if (rate > 0) {
                    long due = began + (i - start) * 1_000_000_000L / rate;
                    long wait = due - System.nanoTime();
                    if (wait > 0) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
                String value = valueFor(prefix, i, size);
                String key = a.has("--keyed") ? "k" + (i % 16) : null;
                Integer partition = a.values.containsKey("--partition") ? (int) a.num("--partition", 0) : null;
                Long timestamp = stamped ? tsBase + (i - start) * tsStep : null;
                String topic = topicList[(int) ((i - start) % topicList.length)];
                producer.send(new ProducerRecord<>(topic, partition, timestamp, key, value), (md, e) -> {
                    if (e != null) errors.add(errText(e));
                    else delivered.add(new Object[] {md.partition(), md.hasOffset() ? md.offset() : -1L, value, md.topic()});
                });
            }
            producer.flush();
        }

        Map<String, Long> partitions = new TreeMap<>();
        Map<String, Long> byTopic = new TreeMap<>();
        Map<String, List<Long>> offsets = new TreeMap<>();
        List<String> values = new ArrayList<>();
        synchronized (delivered) {
            for (Object[] d : delivered) {
                int part = (Integer) d[0];
                long off = (Long) d[1];
                partitions.merge(String.valueOf(part), 1L, Long::sum);
                byTopic.merge((String) d[3], 1L, Long::sum);
                if (off >= 0) addOffset(offsets, part, off);
                values.add((String) d[2]);
            }
        }
        Map<String, Object> r = new TreeMap<>();
        r.put("delivered", delivered.size());
        r.put("count", count);
        r.put("undelivered", count - delivered.size() - errors.size());
        r.put("errors", new ArrayList<>(new TreeSet<>(errors)).subList(0, Math.min(20, new TreeSet<>(errors).size())));
        r.put("error_count", errors.size());
        r.put("partitions", partitions);
        r.put("topics", byTopic);
        r.put("offsets", offsets);
        r.put("values_sha", valuesSha(values));
        r.put("elapsed_s", (System.nanoTime() - t0) / 1e9);
        r.put("client", "kafka-clients " + AppInfoVersion.get());
        boolean ok = delivered.size() == count;
        emit(r, ok, ok ? null : "java produce: delivered " + delivered.size() + " of " + count + " " + errors);
    }

    // --- consume ---------------------------------------------------------------

    static void consume(Args a, long t0) throws Exception {
        String topic = a.get("--topic");
        long expect = a.num("--expect", -1);
        if (expect < 0) usage("--expect is required");
        boolean assign = a.has("--assign");
        String group = a.get("--group", null);
        if (!assign && group == null) usage("--group is required unless --assign");
        int members = assign ? 1 : (int) a.num("--members", 1);
        boolean commit = !assign && a.has("--commit");
        double timeout = a.secs("--timeout", 60);
        double linger = a.secs("--linger", 0);

        Object lock = new Object();
        Map<List<Long>, String[]> seen = new HashMap<>(); // [partition, offset] -> [key, value]
        AtomicLong received = new AtomicLong();
        Map<String, Long> byMember = new ConcurrentHashMap<>();
        List<List<Long>> violations = Collections.synchronizedList(new ArrayList<>());
        AtomicBoolean inOrder = new AtomicBoolean(true);
        List<String> errors = Collections.synchronizedList(new ArrayList<>());
        AtomicBoolean done = new AtomicBoolean(false);
        AtomicLong reachedAt = new AtomicLong(0);
        List<KafkaConsumer<String, String>> consumers = Collections.synchronizedList(new ArrayList<>());

        List<Thread> threads = new ArrayList<>();
        for (int idx = 0; idx < members; idx++) {
            final int me = idx;
            Thread t = new Thread(() -> {
                Properties p = new Properties();
                p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("--bootstrap"));
                p.put(ConsumerConfig.GROUP_ID_CONFIG, group == null ? "java_consume-assign" : group);
                p.put(ConsumerConfig.CLIENT_ID_CONFIG, "java_consume-" + me);
                p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
                p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
                // The consumer group protocol (KIP-848) takes both from
                // the coordinator and refuses them here.
                if (!"consumer".equalsIgnoreCase(a.extra.getProperty(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic"))) {
                    p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10000);
                    p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 1000);
                }
                p.putAll(a.extra);
                KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
                consumers.add(c);
                Map<TopicPartition, OffsetAndMetadata> consumed = new HashMap<>();
                Map<Integer, Long> last = new HashMap<>();
                long count = 0;
                try {
                    if (assign) {
                        List<TopicPartition> parts = new ArrayList<>();
                        for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30))) {
                            parts.add(new TopicPartition(topic, pi.partition()));
                        }
                        if (parts.isEmpty()) errors.add("no partitions for " + topic);
                        c.assign(parts);
                        c.seekToBeginning(parts);
                    } else {
                        c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                                Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
                                for (TopicPartition tp : parts) {
                                    OffsetAndMetadata o = consumed.remove(tp);
                                    if (o != null) offs.put(tp, o);
                                }
                                if (commit && !offs.isEmpty()) {
                                    try {
                                        c.commitSync(offs);
                                    } catch (Exception e) {
                                        errors.add("commit: " + errText(e));
                                    }
                                }
                            }

                            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                                for (TopicPartition tp : parts) last.remove(tp.partition());
                            }
                        });
                    }
                    while (!done.get()) {
                        for (ConsumerRecord<String, String> m : c.poll(Duration.ofMillis(200))) {
                            int part = m.partition();
                            long off = m.offset();
                            Long prev = last.get(part);
                            if (prev != null && off <= prev) {
                                inOrder.set(false);
                                if (violations.size() < 10) violations.add(List.of((long) part, prev, off));
                            }
                            last.put(part, off);
                            consumed.put(new TopicPartition(topic, part), new OffsetAndMetadata(off + 1));
                            count++;
                            byMember.put(String.valueOf(me), count);
                            received.incrementAndGet();
                            synchronized (lock) {
                                seen.putIfAbsent(List.of((long) part, off), new String[] {m.key(), m.value()});
                                if (seen.size() >= expect && reachedAt.get() == 0) reachedAt.set(System.nanoTime());
                            }
                        }
                    }
                    if (commit && !consumed.isEmpty()) c.commitSync(consumed);
                } catch (Exception e) {
                    errors.add("member " + me + ": " + errText(e));
                }
                byMember.putIfAbsent(String.valueOf(me), count);
            });
            t.setDaemon(true);
            t.start();
            threads.add(t);
        }

        long deadline = t0 + (long) (timeout * 1e9);
        while (System.nanoTime() < deadline) {
            long r = reachedAt.get();
            if (r != 0 && System.nanoTime() >= r + (long) (linger * 1e9)) break;
            Thread.sleep(50);
        }
        done.set(true);
        for (Thread t : threads) t.join(30000);

        Map<String, Object> committed = new TreeMap<>();
        if (!assign && !consumers.isEmpty()) {
            KafkaConsumer<String, String> c = consumers.get(0);
            try {
                Set<TopicPartition> parts = new HashSet<>();
                for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(10))) {
                    parts.add(new TopicPartition(topic, pi.partition()));
                }
                Map<TopicPartition, OffsetAndMetadata> got = c.committed(parts, Duration.ofSeconds(10));
                for (TopicPartition tp : parts) {
                    OffsetAndMetadata o = got.get(tp);
                    committed.put(String.valueOf(tp.partition()), o == null ? null : o.offset());
                }
            } catch (Exception e) {
                errors.add("committed: " + errText(e));
            }
        }
        for (KafkaConsumer<String, String> c : consumers) {
            try {
                c.close(Duration.ofSeconds(10));
            } catch (Exception e) {
                errors.add("close: " + errText(e));
            }
        }

        Map<String, Long> partitions = new TreeMap<>();
        Map<String, List<Long>> offsets = new TreeMap<>();
        List<String> values = new ArrayList<>();
        List<List<Object>> list = new ArrayList<>();
        TreeMap<List<Long>, String[]> sorted = new TreeMap<>((x, y) ->
            x.get(0).equals(y.get(0)) ? Long.compare(x.get(1), y.get(1)) : Long.compare(x.get(0), y.get(0)));
        synchronized (lock) {
            sorted.putAll(seen);
        }
        for (Map.Entry<List<Long>, String[]> e : sorted.entrySet()) {
            int part = e.getKey().get(0).intValue();
            long off = e.getKey().get(1);
            partitions.merge(String.valueOf(part), 1L, Long::sum);
            addOffset(offsets, part, off);
            values.add(e.getValue()[1]);
            list.add(Arrays.asList(part, off, e.getValue()[0], e.getValue()[1]));
        }
        TreeSet<String> errs = new TreeSet<>(errors);
        Map<String, Object> r = new TreeMap<>();
        r.put("records", sorted.size());
        r.put("received", received.get());
        r.put("duplicates", received.get() - sorted.size());
        r.put("expect", expect);
        r.put("by_member", byMember);
        r.put("partitions", partitions);
        r.put("offsets", offsets);
        r.put("per_partition_in_order", inOrder.get());
        r.put("order_violations", new ArrayList<>(violations));
        r.put("values_sha", valuesSha(values));
        r.put("committed", committed);
        r.put("errors", new ArrayList<>(errs).subList(0, Math.min(20, errs.size())));
        r.put("elapsed_s", (System.nanoTime() - t0) / 1e9);
        if (a.has("--records")) r.put("records_list", list);
        boolean ok = sorted.size() >= expect;
        emit(r, ok, ok ? null : "java consume: saw " + sorted.size() + " of " + expect + " records");
    }

    // --- admin -----------------------------------------------------------------

    static void admin(Args a, long t0) throws Exception {
        if (a.positional.size() != 1) usage("admin needs one of create|describe|delete|offsets");
        String op = a.positional.get(0);
        String topic = a.get("--topic", null);
        if (!op.equals("describe") && topic == null) usage(op + " needs --topic");
        int timeoutMs = (int) (a.secs("--timeout", 30) * 1000);
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("--bootstrap"));
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "java_admin");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, timeoutMs);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, timeoutMs);
        p.putAll(a.extra);

        Map<String, Object> r = new TreeMap<>();
        r.put("op", op);
        r.put("topic", topic);
        String error = null;
        try (Admin admin = Admin.create(p)) {
            switch (op) {
                case "create": {
                    NewTopic nt = new NewTopic(topic, (int) a.num("--partitions", 8),
                        (short) a.num("--replication-factor", 1));
                    try {
                        admin.createTopics(List.of(nt)).all().get();
                    } catch (Exception e) {
                        error = errText(e);
                    }
                    break;
                }
                case "delete":
                    try {
                        admin.deleteTopics(List.of(topic)).all().get();
                    } catch (Exception e) {
                        error = errText(e);
                    }
                    break;
                case "describe": {
                    DescribeClusterResult cl = admin.describeCluster();
                    r.put("cluster_id", cl.clusterId().get());
                    Node controller = cl.controller().get();
                    r.put("controller_id", controller == null ? null : controller.id());
                    List<Map<String, Object>> brokers = new ArrayList<>();
                    for (Node n : cl.nodes().get()) {
                        brokers.add(new TreeMap<>(Map.of("id", n.id(), "host", n.host(), "port", n.port())));
                    }
                    r.put("brokers", brokers);
                    Collection<String> names = topic != null ? List.of(topic) : admin.listTopics().names().get();
                    Map<String, Object> topics = new TreeMap<>();
                    for (Map.Entry<String, KafkaFuture<TopicDescription>> e :
                            admin.describeTopics(names).topicNameValues().entrySet()) {
                        Map<String, Object> t = new TreeMap<>();
                        Map<String, Object> leaders = new TreeMap<>(), replicas = new TreeMap<>(), isrs = new TreeMap<>();
                        try {
                            TopicDescription d = e.getValue().get();
                            t.put("partitions", d.partitions().size());
                            t.put("error", null);
                            for (TopicPartitionInfo pi : d.partitions()) {
                                String k = String.valueOf(pi.partition());
                                leaders.put(k, pi.leader() == null ? null : pi.leader().id());
                                List<Integer> rs = new ArrayList<>(), is = new ArrayList<>();
                                for (Node n : pi.replicas()) rs.add(n.id());
                                for (Node n : pi.isr()) is.add(n.id());
                                replicas.put(k, rs);
                                isrs.put(k, is);
                            }
                        } catch (Exception ex) {
                            t.put("partitions", 0);
                            t.put("error", errText(ex));
                        }
                        t.put("leaders", leaders);
                        t.put("replicas", replicas);
                        t.put("isrs", isrs);
                        topics.put(e.getKey(), t);
                    }
                    r.put("topics", topics);
                    if (topic != null) {
                        @SuppressWarnings("unchecked")
                        Object terr = ((Map<String, Object>) topics.get(topic)).get("error");
                        if (terr != null) error = (String) terr;
                        Map<String, Object> configs = new TreeMap<>();
                        r.put("configs_error", null);
                        try {
                            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
                            Config cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
                            for (ConfigEntry ce : cfg.entries()) configs.put(ce.name(), ce.value());
                        } catch (Exception ex) {
                            r.put("configs_error", errText(ex));
                        }
                        r.put("configs", configs);
                    }
                    break;
                }
                case "offsets": {
                    Map<String, Object> earliest = new TreeMap<>(), latest = new TreeMap<>();
                    r.put("earliest", earliest);
                    r.put("latest", latest);
                    try {
                        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                        for (Object[] spec : new Object[][] {{OffsetSpec.earliest(), earliest}, {OffsetSpec.latest(), latest}}) {
                            Map<TopicPartition, OffsetSpec> req = new HashMap<>();
                            for (TopicPartitionInfo pi : d.partitions()) {
                                req.put(new TopicPartition(topic, pi.partition()), (OffsetSpec) spec[0]);
                            }
                            @SuppressWarnings("unchecked")
                            Map<String, Object> into = (Map<String, Object>) spec[1];
                            admin.listOffsets(req).all().get().forEach((tp, info) ->
                                into.put(String.valueOf(tp.partition()), info.offset()));
                        }
                        if (a.values.containsKey("--timestamp")) {
                            Map<String, Object> at = new TreeMap<>();
                            r.put("at", at);
                            Map<TopicPartition, OffsetSpec> req = new HashMap<>();
                            for (TopicPartitionInfo pi : d.partitions()) {
                                req.put(new TopicPartition(topic, pi.partition()),
                                    OffsetSpec.forTimestamp(a.num("--timestamp", 0)));
                            }
                            admin.listOffsets(req).all().get().forEach((tp, info) ->
                                at.put(String.valueOf(tp.partition()), info.offset()));
                        }
                    } catch (Exception e) {
                        error = errText(e);
                    }
                    break;
                }
                default:
                    usage("unknown admin operation " + op);
            }
        }
        r.put("error", error);
        r.put("ok", error == null);
        boolean ok = error == null || a.has("--allow-error");
        emit(r, ok, ok ? null : "java admin " + op + ": " + error);
    }

    static void txn(Args a, long t0) throws Exception {
        int transactions = (int) a.num("--transactions", 6);
        int per = (int) a.num("--per", 20);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("--bootstrap"));
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "java_txn");
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, a.get("--txn-id", "java-txn"));
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        p.putAll(a.extra);
        Map<String, Object> r = new TreeMap<>();
        int committed = 0, aborted = 0;
        List<String> committedValues = new ArrayList<>();
        String error = null;
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            producer.initTransactions();
            for (int t = 0; t < transactions; t++) {
                producer.beginTransaction();
                List<String> values = new ArrayList<>();
                for (int i = 0; i < per; i++) {
                    String v = "jtxn" + t + "-" + i;
                    values.add(v);
                    producer.send(new ProducerRecord<>(a.get("--topic"), "k" + (i % 4), v));
                }
                producer.flush();
                if (t % 2 == 0) {
                    producer.commitTransaction();
                    committed += per;
                    committedValues.addAll(values);
                } else {
                    producer.abortTransaction();
                    aborted += per;
                }
            }
        } catch (Exception e) {
            error = errText(e);
        }
        r.put("committed", committed);
        r.put("aborted", aborted);
        r.put("committed_values", committedValues);
        r.put("error", error);
        emit(r, error == null, error);
    }

    /**
     * lagpoll: what a lag exporter such as kafka_exporter does, with the
     * Java AdminClient: every --interval seconds (default 5) for --seconds
     * (default 75), lists the consumer groups, describes them, reads their
     * committed offsets and the latest offset of every partition they
     * committed. Reports the polls made, the last poll's groups,
     * partitions and summed lag, and this process's CPU seconds and
     * resident memory over the polls after the first --warmup seconds
     * (default 15: class loading and JIT left out).
     */
    static void lagpoll(Args a, long t0) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("--bootstrap"));
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "java_lagpoll");
        p.putAll(a.extra);
        long intervalNs = (long) (a.secs("--interval", 5) * 1e9);
        long endNs = t0 + (long) (a.secs("--seconds", 75) * 1e9);
        long warmupNs = t0 + (long) (a.secs("--warmup", 15) * 1e9);
        com.sun.management.OperatingSystemMXBean os = (com.sun.management.OperatingSystemMXBean)
            java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        Map<String, Object> r = new TreeMap<>();
        String error = null;
        long polls = 0, measuredPolls = 0, cpuAtWarmup = -1, wallAtWarmup = 0, groups = 0, partitions = 0, lag = 0;
        try (Admin admin = Admin.create(p)) {
            for (long next = System.nanoTime(); next < endNs; next += intervalNs) {
                long wait = next - System.nanoTime();
                if (wait > 0) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                if (cpuAtWarmup < 0 && System.nanoTime() >= warmupNs) {
                    cpuAtWarmup = os.getProcessCpuTime();
                    wallAtWarmup = System.nanoTime();
                }
                List<String> ids = new ArrayList<>();
                for (ConsumerGroupListing g : admin.listConsumerGroups().all().get()) ids.add(g.groupId());
                admin.describeConsumerGroups(ids).all().get();
                Map<String, ListConsumerGroupOffsetsSpec> specs = new HashMap<>();
                for (String id : ids) specs.put(id, new ListConsumerGroupOffsetsSpec());
                Map<String, Map<TopicPartition, OffsetAndMetadata>> committed =
                    specs.isEmpty() ? Map.of() : admin.listConsumerGroupOffsets(specs).all().get();
                Map<TopicPartition, OffsetSpec> wanted = new HashMap<>();
                for (Map<TopicPartition, OffsetAndMetadata> m : committed.values())
                    for (TopicPartition tp : m.keySet()) wanted.put(tp, OffsetSpec.latest());
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends =
                    admin.listOffsets(wanted).all().get();
                long sum = 0, count = 0;
                for (Map<TopicPartition, OffsetAndMetadata> m : committed.values()) {
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : m.entrySet()) {
                        if (e.getValue() == null || !ends.containsKey(e.getKey())) continue;
                        sum += Math.max(0, ends.get(e.getKey()).offset() - e.getValue().offset());
                        count++;
                    }
                }
                polls++;
                if (cpuAtWarmup >= 0) measuredPolls++;
                groups = ids.size();
                partitions = count;
                lag = sum;
            }
        } catch (Exception e) {
            error = errText(e);
        }
        long rssKb = 0;
        for (String line : java.nio.file.Files.readAllLines(java.nio.file.Path.of("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) rssKb = Long.parseLong(line.replaceAll("[^0-9]", ""));
        }
        r.put("polls", polls);
        r.put("measured_polls", measuredPolls);
        r.put("groups", groups);
        r.put("partitions", partitions);
        r.put("lag", lag);
        r.put("cpu_seconds", cpuAtWarmup < 0 ? 0.0 : (os.getProcessCpuTime() - cpuAtWarmup) / 1e9);
        r.put("measured_seconds", cpuAtWarmup < 0 ? 0.0 : (System.nanoTime() - wallAtWarmup) / 1e9);
        r.put("rss_bytes", rssKb * 1024);
        r.put("error", error);
        emit(r, error == null, error);
    }

    /** kafka-clients' version, as the jar's AppInfo reports it. */
    static final class AppInfoVersion {
        static String get() {
            return org.apache.kafka.common.utils.AppInfoParser.getVersion();
        }
    }

    public static void main(String[] argv) {
        long t0 = System.nanoTime();
        if (argv.length < 1) usage("usage: JavaClient produce|consume|admin|txn|lagpoll|version ...");
        Set<String> flags = Set.of("--idempotent", "--no-idempotent", "--keyed", "--assign", "--commit",
            "--records", "--allow-error");
        Args a = new Args(argv, 1, flags);
        try {
            switch (argv[0]) {
                case "produce": produce(a, t0); break;
                case "consume": consume(a, t0); break;
                case "admin": admin(a, t0); break;
                case "txn": txn(a, t0); break;
                case "lagpoll": lagpoll(a, t0); break;
                case "version":
                    System.out.println(AppInfoVersion.get());
                    System.exit(0);
                    break;
                default: usage("unknown command " + argv[0]);
            }
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(3);
        }
    }
}
