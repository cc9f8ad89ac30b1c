package io.rmqspec.javadriver;

import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.impl.producer.DefaultMQProducerImpl;
import org.apache.rocketmq.client.impl.producer.TopicPublishInfo;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * rmqspec's wall-clock workload, run by Apache RocketMQ's own Java client (org.apache.rocketmq:rocketmq-client
 * at the broker's version), recorded as an rmqspec history by {@link WireRecorder}.
 *
 * <p>Arguments are key=value: broker (host:port), brokerName, cluster, seconds (the workload), settle (how
 * long the consumer goes on after the producers stop), seed, producers, levels (the delay levels the
 * producers use, one producer each, comma-separated), pollMs (the consumer's pause between reads of every
 * queue), commitLogFileSize, out (the history file), client (the client's Maven coordinate, for the header).
 *
 * <p>No name server runs beside a broker rmqspec starts, so the client is told the broker's address and the
 * route of each topic (queue 0 of the broker) the way a name server's answer would tell it: the client's
 * broker table and topic route table, and each producer's publish info. Everything else is the client's own
 * code: DefaultMQProducer.send (plain and DELAY messages with user properties), TransactionMQProducer
 * .sendMessageInTransaction with a TransactionListener that answers executes and checks deterministically
 * from the message (END_TRANSACTION goes one-way, as the client sends it), DefaultMQPullConsumer.pull and
 * sendMessageBack, the client's own heartbeats, and at the end VIEW_MESSAGE_BY_ID from offset 0 to the
 * commit log's end, record by record.
 */
public final class Driver {
    private final Map<String, String> args;
    private final String broker;
    private final String brokerName;
    private final String cluster;
    private final String run;
    private final WireRecorder recorder;
    private final AtomicBoolean stop = new AtomicBoolean();
    private final AtomicLong operations = new AtomicLong();
    private final List<String> problems = new ArrayList<>();

    private Driver(Map<String, String> args) {
        this.args = args;
        this.broker = need("broker");
        this.brokerName = need("brokerName");
        this.cluster = args.getOrDefault("cluster", "DefaultCluster");
        long seed = Long.parseLong(args.getOrDefault("seed", "0"));
        this.run = Long.toHexString(seed) + Long.toHexString(System.currentTimeMillis() % 1_000_000L);
        this.recorder = new WireRecorder(broker);
    }

    private String need(String k) {
        String v = args.get(k);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("missing argument " + k + "=...");
        }
        return v;
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int eq = s.indexOf('=');
            if (eq <= 0) {
                System.err.println("rmqspec-javadriver: arguments are key=value, not " + s);
                System.exit(2);
            }
            a.put(s.substring(0, eq), s.substring(eq + 1));
        }
        Driver d;
        try {
            d = new Driver(a);
        } catch (IllegalArgumentException e) {
            System.err.println("rmqspec-javadriver: " + e.getMessage());
            System.exit(2);
            return;
        }
        int rc = d.runAll();
        System.exit(rc);
    }

    // --- deterministic transaction answers --------------------------------------------------------------

    /** The message's number: bodies are "t-<producer>-<n>". */
    static long number(Message m) {
        String b = new String(m.getBody(), StandardCharsets.UTF_8);
        return Long.parseLong(b.substring(b.lastIndexOf('-') + 1));
    }

    /** What the local transaction answers (n mod 6): commit, rollback, or unknown (left to the checks). */
    static LocalTransactionState execute(long n) {
        switch ((int) (n % 6)) {
            case 0:
                return LocalTransactionState.COMMIT_MESSAGE;
            case 1:
                return LocalTransactionState.ROLLBACK_MESSAGE;
            default:
                return LocalTransactionState.UNKNOW;
        }
    }

    /** What a check answers, by the message's number and the broker's check count (TRANSACTION_CHECK_TIMES):
     *  2 commits, 3 rolls back, 4 never decides (the broker discards it after transactionCheckMax checks), 5
     *  stays unknown at the first check and commits at the next. */
    static LocalTransactionState check(long n, int times) {
        switch ((int) (n % 6)) {
            case 2:
                return LocalTransactionState.COMMIT_MESSAGE;
            case 3:
                return LocalTransactionState.ROLLBACK_MESSAGE;
            case 5:
                return times <= 1 ? LocalTransactionState.UNKNOW : LocalTransactionState.COMMIT_MESSAGE;
            default:
                return LocalTransactionState.UNKNOW;
        }
    }

    // --- routes without a name server ----------------------------------------------------------------

    private static Class<?> routeClass(String simple) throws ClassNotFoundException {
        for (String pkg : new String[] {"org.apache.rocketmq.remoting.protocol.route.", "org.apache.rocketmq.common.protocol.route."}) {
            try {
                return Class.forName(pkg + simple);
            } catch (ClassNotFoundException e) {
                // the other release line's package
            }
        }
        throw new ClassNotFoundException(simple);
    }

    /** A TopicRouteData naming one broker with one read and one write queue (what a name server answers). */
    private Object routeData() throws ReflectiveOperationException {
        HashMap<Long, String> addrs = new HashMap<>();
        addrs.put(0L, broker);
        Object bd = routeClass("BrokerData").getConstructor(String.class, String.class, HashMap.class)
            .newInstance(cluster, brokerName, addrs);
        Object qd = routeClass("QueueData").getConstructor().newInstance();
        qd.getClass().getMethod("setBrokerName", String.class).invoke(qd, brokerName);
        qd.getClass().getMethod("setReadQueueNums", int.class).invoke(qd, 1);
        qd.getClass().getMethod("setWriteQueueNums", int.class).invoke(qd, 1);
        qd.getClass().getMethod("setPerm", int.class).invoke(qd, 6);
        Object rd = routeClass("TopicRouteData").getConstructor().newInstance();
        List<Object> bds = new ArrayList<>();
        bds.add(bd);
        List<Object> qds = new ArrayList<>();
        qds.add(qd);
        rd.getClass().getMethod("setBrokerDatas", List.class).invoke(rd, bds);
        rd.getClass().getMethod("setQueueDatas", List.class).invoke(rd, qds);
        rd.getClass().getMethod("setFilterServerTable", HashMap.class).invoke(rd, new HashMap<String, List<String>>());
        return rd;
    }

    @SuppressWarnings("unchecked")
    private void installRoutes(MQClientInstance instance, List<DefaultMQProducerImpl> producers, List<String> topics)
            throws ReflectiveOperationException {
        HashMap<Long, String> addrs = new HashMap<>();
        addrs.put(0L, broker);
        Field bt = MQClientInstance.class.getDeclaredField("brokerAddrTable");
        bt.setAccessible(true);
        ((ConcurrentMap<String, HashMap<Long, String>>) bt.get(instance)).put(brokerName, addrs);
        Object rd = routeData();
        // cleanOfflineBroker drops a broker no topic route names: name it in one route per topic
        Field f = MQClientInstance.class.getDeclaredField("topicRouteTable");
        f.setAccessible(true);
        ConcurrentMap<String, Object> routes = (ConcurrentMap<String, Object>) f.get(instance);
        for (String t : topics) {
            routes.put(t, rd);
        }
        for (DefaultMQProducerImpl p : producers) {
            for (String t : topics) {
                TopicPublishInfo info = new TopicPublishInfo();
                info.setOrderTopic(false);
                info.setHaveTopicRouterInfo(true);
                List<MessageQueue> mqs = new ArrayList<>();
                mqs.add(new MessageQueue(t, brokerName, 0));
                info.setMessageQueueList(mqs);
                for (Method m : TopicPublishInfo.class.getMethods()) {
                    if (m.getName().equals("setTopicRouteData")) {
                        m.invoke(info, rd);
                    }
                }
                p.updateTopicPublishInfo(t, info);
            }
        }
    }

    // --- the workload ---------------------------------------------------------------------------------

    private int runAll() throws Exception {
        double seconds = Double.parseDouble(args.getOrDefault("seconds", "20"));
        double settle = Double.parseDouble(args.getOrDefault("settle", "20"));
        int nProducers = Integer.parseInt(args.getOrDefault("producers", "2"));
        String[] levelText = args.getOrDefault("levels", "1,2").split(",");
        int[] levels = new int[levelText.length];
        for (int i = 0; i < levels.length; i++) {
            levels[i] = Integer.parseInt(levelText[i].trim());
        }
        long seed = Long.parseLong(args.getOrDefault("seed", "0"));
        long pollMs = Long.parseLong(args.getOrDefault("pollMs", "200"));
        Path out = Paths.get(need("out"));
        String instanceName = "rmqspec-" + run;
        String pgroup = "PG_j" + run;
        String tgroup = "TG_j" + run;
        String cgroup = "CG_j" + run;
        List<String> topics = new ArrayList<>();
        List<String> delayed = new ArrayList<>();
        for (int i = 0; i < nProducers; i++) {
            topics.add("J" + run + "_" + i);
            delayed.add("J" + run + "_" + i + "d");
        }
        List<String> all = new ArrayList<>(topics);
        all.addAll(delayed);

        recorder.assign(Thread.currentThread(), 0);
        DefaultMQProducer producer = new DefaultMQProducer(pgroup, recorder);
        TransactionMQProducer txProducer = new TransactionMQProducer(tgroup, recorder);
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(cgroup, recorder);
        for (org.apache.rocketmq.client.ClientConfig c : new org.apache.rocketmq.client.ClientConfig[] {producer, txProducer, consumer}) {
            c.setInstanceName(instanceName);
            c.setNamesrvAddr("127.0.0.1:9876"); // none runs: routes are installed below
            c.setVipChannelEnabled(false);
        }
        producer.setSendMsgTimeout(5000);
        producer.setRetryTimesWhenSendFailed(0); // a failed send is the broker's answer, not resent
        txProducer.setSendMsgTimeout(5000);
        consumer.setMaxReconsumeTimes(2);
        txProducer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return execute(number(msg));
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String times = msg.getProperty("TRANSACTION_CHECK_TIMES");
                return check(number(msg), times == null ? 0 : Integer.parseInt(times));
            }
        });
        producer.start();
        txProducer.start();
        consumer.start();
        MQClientInstance instance = MQClientManager.getInstance().getOrCreateMQClientInstance(producer, recorder);
        // a consumer's client id differs from a producer's (4.9.7 appends @STREAM): it has its own instance,
        // connection and tables
        MQClientInstance consumerInstance = MQClientManager.getInstance().getOrCreateMQClientInstance(consumer, recorder);
        recorder.setRemotingClients(instance.getMQClientAPIImpl().getRemotingClient(),
            consumerInstance.getMQClientAPIImpl().getRemotingClient());
        installRoutes(instance, List.of(producer.getDefaultMQProducerImpl(), txProducer.getDefaultMQProducerImpl()), all);
        instance.sendHeartbeatToAllBrokerWithLock(); // what start() does once routes are known
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < nProducers; i++) {
            final int id = i;
            List<Integer> mine = new ArrayList<>();
            for (int k = i; k < levels.length; k += nProducers) {
                mine.add(levels[k]);
            }
            if (mine.isEmpty()) {
                mine.add(levels[i % levels.length]);
            }
            Thread t = new Thread(() -> produce(id, seed, producer, txProducer, topics.get(id), delayed.get(id), mine), "rmqspec-producer-" + i);
            recorder.assign(t, 1 + i);
            threads.add(t);
        }
        Map<String, Long> offsets = new LinkedHashMap<>();
        List<String> pullTopics = new ArrayList<>(all);
        pullTopics.add("%RETRY%" + cgroup);
        pullTopics.add("%DLQ%" + cgroup);
        // the retry and DLQ topics' routes: the consumer reads them like any topic of the broker
        installRoutes(consumerInstance, List.of(), pullTopics);
        if (consumerInstance != instance) {
            consumerInstance.sendHeartbeatToAllBrokerWithLock();
        }
        AtomicBoolean consuming = new AtomicBoolean(true);
        Thread consumerThread = new Thread(() -> {
            java.util.Random rnd = new java.util.Random(seed + 7);
            while (consuming.get()) {
                pullAll(consumer, pullTopics, offsets, rnd);
                sleep(pollMs);
            }
        }, "rmqspec-consumer");
        recorder.assign(consumerThread, 90);
        threads.forEach(Thread::start);
        consumerThread.start();
        sleep((long) (seconds * 1000));
        stop.set(true);
        for (Thread t : threads) {
            t.join(30_000);
        }
        System.err.println("rmqspec-javadriver: producers stopped; settling " + settle + " s");
        sleep((long) (settle * 1000));
        consuming.set(false);
        consumerThread.join(30_000);
        pullAll(consumer, pullTopics, offsets, null); // the last read, without send-backs
        Thread reader = new Thread(() -> readBack(instance.getMQClientAPIImpl()), "rmqspec-read-back");
        recorder.assign(reader, 95);
        reader.start();
        reader.join();
        consumer.shutdown();
        txProducer.shutdown();
        producer.shutdown();
        recorder.closeAll();
        write(out);
        System.err.println("rmqspec-javadriver: " + operations.get() + " workload operations; history in " + out
            + "; not recorded (not operations of the model): " + recorder.skipped());
        for (String p : new ArrayList<>(problems)) {
            System.err.println("rmqspec-javadriver: " + p);
        }
        return 0;
    }

    private void produce(int id, long seed, DefaultMQProducer producer, TransactionMQProducer txProducer,
                         String topic, String delayedTopic, List<Integer> mine) {
        java.util.Random rnd = new java.util.Random(seed * 1000 + id);
        long n = 0;
        while (!stop.get()) {
            n++;
            double kind = rnd.nextDouble();
            try {
                if (kind < 0.35) {
                    Message m = new Message(topic, ("p-" + id + "-" + n).getBytes(StandardCharsets.UTF_8));
                    m.setKeys("k" + id + "-" + n);
                    m.putUserProperty("rmqspec_n", Long.toString(n));
                    producer.send(m);
                } else if (kind < 0.75) {
                    Message m = new Message(delayedTopic, ("d-" + id + "-" + n).getBytes(StandardCharsets.UTF_8));
                    m.setDelayTimeLevel(mine.get(rnd.nextInt(mine.size())));
                    m.putUserProperty("rmqspec_n", Long.toString(n));
                    producer.send(m);
                } else {
                    Message m = new Message(topic, ("t-" + id + "-" + n).getBytes(StandardCharsets.UTF_8));
                    m.putUserProperty("rmqspec_n", Long.toString(n));
                    txProducer.sendMessageInTransaction(m, null);
                }
            } catch (Exception e) {
                recorder.abandon(e);
                problem("send: " + e);
            }
            operations.incrementAndGet();
            sleep(10 + rnd.nextInt(90));
        }
    }

    private void pullAll(DefaultMQPullConsumer consumer, List<String> topics, Map<String, Long> offsets, java.util.Random rnd) {
        for (String topic : topics) {
            while (true) {
                long off = offsets.getOrDefault(topic, 0L);
                PullResult r;
                try {
                    r = consumer.pull(new MessageQueue(topic, brokerName, 0), "*", off, 32);
                } catch (Exception e) {
                    recorder.abandon(e);
                    problem("pull " + topic + ": " + e);
                    break;
                }
                if (r.getPullStatus() != PullStatus.FOUND || r.getNextBeginOffset() <= off) {
                    break;
                }
                offsets.put(topic, r.getNextBeginOffset());
                for (MessageExt m : r.getMsgFoundList()) {
                    if (rnd != null && m.getReconsumeTimes() < 2 && rnd.nextDouble() < 0.3) {
                        int level = rnd.nextInt(3) < 2 ? 0 : -1;
                        try {
                            consumer.sendMessageBack(m, level, brokerName);
                        } catch (Exception e) {
                            recorder.abandon(e);
                            problem("send-back: " + e);
                        }
                    }
                }
            }
        }
    }

    /** VIEW_MESSAGE_BY_ID from physical offset 0, each next offset the last one plus its store size, up to
     *  the commit log's end (GET_BROKER_RUNTIME_INFO's commitLogMaxOffset), until the end stops moving. */
    private void readBack(MQClientAPIImpl api) {
        long fileSize = Long.parseLong(args.getOrDefault("commitLogFileSize", Long.toString(1L << 30)));
        long offset = 0;
        int records = 0;
        try {
            for (int round = 0; round < 5; round++) {
                long end = maxPhysicalOffset(api);
                if (offset >= end) {
                    break;
                }
                while (offset < end) {
                    MessageExt m;
                    try {
                        m = view(api, offset);
                    } catch (org.apache.rocketmq.client.exception.MQBrokerException e) {
                        m = null;
                    }
                    if (m == null || m.getStoreSize() <= 0) {
                        if (offset % fileSize != 0) { // the blank end of a commit-log file: the next file
                            offset = (offset / fileSize + 1) * fileSize;
                            continue;
                        }
                        problem("read-back stopped at offset " + offset + " (no record there)");
                        return;
                    }
                    records++;
                    offset += m.getStoreSize();
                }
            }
        } catch (Exception e) {
            recorder.abandon(e);
            problem("read-back stopped at offset " + offset + ": " + e);
        }
        System.err.println("rmqspec-javadriver: read back " + records + " records, offsets 0.." + offset);
    }

    private long maxPhysicalOffset(MQClientAPIImpl api) throws Exception {
        Object kv = api.getBrokerRuntimeInfo(broker, 5000);
        @SuppressWarnings("unchecked")
        Map<String, String> table = (Map<String, String>) kv.getClass().getMethod("getTable").invoke(kv);
        return Long.parseLong(table.get("commitLogMaxOffset"));
    }

    /** MQClientAPIImpl.viewMessage: (addr, offset, timeout) at 4.9.x, (addr, topic, offset, timeout) at 5.x. */
    private MessageExt view(MQClientAPIImpl api, long offset) throws Exception {
        for (Method m : MQClientAPIImpl.class.getMethods()) {
            if (!m.getName().equals("viewMessage")) {
                continue;
            }
            Class<?>[] ps = m.getParameterTypes();
            try {
                if (ps.length == 3 && ps[1] == long.class) {
                    return (MessageExt) m.invoke(api, broker, offset, 5000L);
                }
                if (ps.length == 4 && ps[1] == String.class && ps[2] == long.class) {
                    return (MessageExt) m.invoke(api, broker, null, offset, 5000L);
                }
            } catch (java.lang.reflect.InvocationTargetException e) {
                throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
            }
        }
        throw new IllegalStateException("this client has no MQClientAPIImpl.viewMessage");
    }

    private void write(Path out) throws IOException {
        Map<String, Object> header = new LinkedHashMap<>();
        header.put("rmqspec_history", 2);
        header.put("recorded_by", "rmqspec-javadriver (Apache's Java client, requests recorded by its RPCHook)");
        header.put("client", args.getOrDefault("client", "org.apache.rocketmq:rocketmq-client"));
        header.put("broker", broker);
        header.put("run", run);
        StringBuilder sb = new StringBuilder(Json.write(header)).append('\n');
        for (String line : recorder.lines()) {
            sb.append(line).append('\n');
        }
        Path tmp = out.resolveSibling(out.getFileName() + ".tmp");
        Files.write(tmp, sb.toString().getBytes(StandardCharsets.UTF_8));
        Files.move(tmp, out, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
    }

    /** An operation that failed in the client: the first few are reported (the history has them as info). */
    private void problem(String what) {
        synchronized (problems) {
            if (problems.size() < 10) {
                problems.add(what);
            }
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
