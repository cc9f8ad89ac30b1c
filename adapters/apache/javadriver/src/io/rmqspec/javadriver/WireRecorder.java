package io.rmqspec.javadriver;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * Records what Apache's client sends to and receives from the broker as an rmqspec history.
 *
 * <p>Every request goes through the client's RPC hook: {@code doBeforeRequest} sees the request just before it
 * is written (its custom header holds every field the client set), {@code doAfterResponse} the answer as
 * decoded from the wire. The broker's CHECK_TRANSACTION_STATE requests pass the same hook on their way in. So
 * the history holds what went over the wire, not what the API was asked: the fields are read from the
 * request's header, the records from the response's body.
 *
 * <p>One operation of a thread is in flight at a time (the client's calls are synchronous); a request
 * whose answer never came (a timeout: the client calls no hook then) is completed as {@code info} when the
 * caller reports the exception ({@link #abandon}) or when the same thread sends its next request. A one-way
 * request (END_TRANSACTION) is recorded as one: an invoke and at once a completion with {@code
 * no_response: true}, as docs/adapter-contract.md records a request that is never answered.
 */
final class WireRecorder implements RPCHook {
    // RequestCode values (org.apache.rocketmq.common.protocol.RequestCode at 4.9.7; the same numbers at 5.5.0)
    static final int SEND_MESSAGE = 10;
    static final int PULL_MESSAGE = 11;
    static final int GET_MAX_OFFSET = 30;
    static final int VIEW_MESSAGE_BY_ID = 33;
    static final int HEART_BEAT = 34;
    static final int UNREGISTER_CLIENT = 35;
    static final int CONSUMER_SEND_MSG_BACK = 36;
    static final int END_TRANSACTION = 37;
    static final int CHECK_TRANSACTION_STATE = 39;
    static final int SEND_MESSAGE_V2 = 310;
    static final int SEND_BATCH_MESSAGE = 320;

    private static final class Pending {
        final int[] processes; // a heartbeat: one operation per producer group, each its own process
        final String f;
        final Thread thread;

        Pending(int[] processes, String f) {
            this.processes = processes;
            this.f = f;
            this.thread = Thread.currentThread();
        }
    }

    private void start(RemotingCommand request, Pending p) {
        synchronized (lock) {
            inFlight.put(request, p);
            byThread.put(p.thread, request);
        }
    }

    /** The operation of ``request`` (or, with null, the calling thread's), no longer in flight. */
    private Pending finish(RemotingCommand request) {
        synchronized (lock) {
            RemotingCommand r = request != null ? request : byThread.get(Thread.currentThread());
            Pending p = r == null ? null : inFlight.remove(r);
            if (p != null && byThread.get(p.thread) == r) {
                byThread.remove(p.thread);
            }
            lock.notifyAll();
            return p;
        }
    }

    /** At the end of the run: what is still in flight (a request the client gave up on inside its own
     *  code, e.g. a heartbeat of its scheduled task that timed out) is completed as unknown. */
    void closeAll() {
        synchronized (lock) {
            Map<String, Object> v = new LinkedHashMap<>();
            v.put("error", "no answer by the end of the run");
            for (Pending p : new ArrayList<>(inFlight.values())) {
                for (int proc : p.processes) {
                    add(proc, "info", p.f, v);
                }
            }
            inFlight.clear();
            byThread.clear();
        }
    }

    /** The 5.x client may return from a call before its response hook has run (on the thread that completed
     *  the response future): a thread's next request waits a little for that answer to be recorded, so that
     *  an operation the broker answered is not taken for one whose outcome is unknown. */
    private void awaitPrevious() {
        long deadline = System.currentTimeMillis() + 2000;
        synchronized (lock) {
            while (byThread.containsKey(Thread.currentThread())) {
                long left = deadline - System.currentTimeMillis();
                if (left <= 0) {
                    return;
                }
                try {
                    lock.wait(left);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
        }
    }

    private final String brokerAddr;
    private final List<String> lines = new ArrayList<>();
    private final Object lock = new Object();
    private final Map<Thread, Integer> processes = new ConcurrentHashMap<>();
    private final AtomicInteger nextProcess = new AtomicInteger(200);
    // Operations in flight, by request (the 5.x client runs doAfterResponse on the thread that completes the
    // response future, not the caller's), and the request each calling thread has in flight.
    private final Map<RemotingCommand, Pending> inFlight = new java.util.IdentityHashMap<>();
    private final Map<Thread, RemotingCommand> byThread = new HashMap<>();
    private final Map<String, Integer> skipped = new TreeMap<>();
    private volatile Object producerClient;
    private volatile Object consumerClient;

    WireRecorder(String brokerAddr) {
        this.brokerAddr = brokerAddr;
    }

    /** The remoting clients (NettyRemotingClient) of the producers' and the consumer's client instances,
     *  whose connections' local addresses are the born hosts of sends and the client hosts of pulls. */
    void setRemotingClients(Object producers, Object consumers) {
        this.producerClient = producers;
        this.consumerClient = consumers;
    }

    void assign(Thread t, int process) {
        processes.put(t, process);
    }

    private int process() {
        return processes.computeIfAbsent(Thread.currentThread(), t -> nextProcess.getAndIncrement());
    }

    List<String> lines() {
        synchronized (lock) {
            return new ArrayList<>(lines);
        }
    }

    Map<String, Integer> skipped() {
        synchronized (lock) {
            return new TreeMap<>(skipped);
        }
    }

    // --- the hook -------------------------------------------------------------------------------------

    @Override
    public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
        try {
            before(remoteAddr, request);
        } catch (RuntimeException e) {
            System.err.println("rmqspec-javadriver: cannot record request " + request.getCode() + ": " + e);
        }
    }

    @Override
    public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
        try {
            after(request, response);
        } catch (RuntimeException e) {
            System.err.println("rmqspec-javadriver: cannot record response " + request.getCode() + ": " + e);
        }
    }

    /** The caller's call failed (a timeout, a lost connection): an operation still in flight is unknown. */
    void abandon(Throwable error) {
        Pending p = finish(null);
        if (p == null) {
            return;
        }
        Map<String, Object> v = new LinkedHashMap<>();
        v.put("error", error.getClass().getSimpleName() + ": " + error.getMessage());
        synchronized (lock) {
            for (int proc : p.processes) {
                add(proc, "info", p.f, v);
            }
        }
    }

    private static long now() {
        return System.currentTimeMillis();
    }

    private void skip(String what) {
        synchronized (lock) {
            skipped.merge(what, 1, Integer::sum);
        }
    }

    private void before(String remoteAddr, RemotingCommand request) {
        int code = request.getCode();
        if (code == CHECK_TRANSACTION_STATE && !request.isResponseType()) {
            recordCheck(request);
            return;
        }
        if (remoteAddr == null || !remoteAddr.equals(brokerAddr)) {
            skip("request " + code + " to " + remoteAddr);
            return;
        }
        Map<String, String> h = header(request);
        awaitPrevious();
        abandon(new IllegalStateException("no answer recorded before the next request"));
        int proc = process();
        switch (code) {
            case SEND_MESSAGE:
            case SEND_MESSAGE_V2: {
                Map<String, Object> v = send(h, request);
                Map<String, String> props = MessageDecoder.string2messageProperties(str(h, "i", "properties"));
                String f = "true".equals(props.get("TRAN_MSG")) ? "send_half" : "send";
                if ("true".equals(str(h, "m", "batch"))) {
                    skip("batch send");
                    return;
                }
                invoke(request, proc, f, v);
                return;
            }
            case PULL_MESSAGE: {
                Map<String, Object> v = new LinkedHashMap<>();
                v.put("topic", h.get("topic"));
                v.put("queue", num(h.get("queueId")));
                v.put("offset", num(h.get("queueOffset")));
                v.put("max", num(h.get("maxMsgNums")));
                v.put("group", h.get("consumerGroup"));
                v.put("client", localHost(consumerClient, remoteAddr));
                invoke(request, proc, "pull", v);
                return;
            }
            case CONSUMER_SEND_MSG_BACK: {
                Map<String, Object> v = new LinkedHashMap<>();
                v.put("group", h.get("group"));
                v.put("offset", num(h.get("offset")));
                v.put("delay_level", num(h.get("delayLevel")));
                v.put("max_reconsume_times", optNum(h.get("maxReconsumeTimes")));
                v.put("origin_msg_id", h.get("originMsgId"));
                v.put("origin_topic", h.get("originTopic"));
                v.put("version", request.getVersion());
                v.put("queue_choice", 0);
                invoke(request, proc, "send_back", v);
                return;
            }
            case END_TRANSACTION: {
                Map<String, Object> v = new LinkedHashMap<>();
                v.put("group", h.get("producerGroup"));
                v.put("table_offset", num(h.get("tranStateTableOffset")));
                v.put("commit_log_offset", num(h.get("commitLogOffset")));
                v.put("action", num(h.get("commitOrRollback")));
                v.put("from_check", Boolean.parseBoolean(h.get("fromTransactionCheck")));
                v.put("msg_id", h.get("msgId"));
                v.put("transaction_id", h.get("transactionId"));
                // MQClientAPIImpl sends END_TRANSACTION only one-way (endTransactionOneway, at 4.9.7 and 5.5.0); the
                // hook runs before invokeOnewayImpl marks the request one-way, so the code says it, not the flag.
                // No answer is expected: an invoke, and at once a completion with no_response.
                synchronized (lock) {
                    add(proc, "invoke", "end_tx", v);
                    add(proc, "ok", "end_tx", noResponse());
                }
                return;
            }
            case GET_MAX_OFFSET: {
                Map<String, Object> v = new LinkedHashMap<>();
                v.put("topic", h.get("topic"));
                v.put("queue", num(h.get("queueId")));
                invoke(request, proc, "max_offset", v);
                return;
            }
            case VIEW_MESSAGE_BY_ID: {
                Map<String, Object> v = new LinkedHashMap<>();
                v.put("offset", num(h.get("offset")));
                invoke(request, proc, "view", v);
                return;
            }
            case HEART_BEAT: {
                String body = request.getBody() == null ? "" : new String(request.getBody(), StandardCharsets.UTF_8);
                heartbeat(request, producerGroups(body), consumerGroups(body), true);
                return;
            }
            case UNREGISTER_CLIENT: {
                String g = h.get("producerGroup");
                if (g == null) {
                    skip("unregister of a consumer group");
                    return;
                }
                heartbeat(request, List.of(g), List.of(), false);
                return;
            }
            default:
                skip("request " + code);
        }
    }

    private void invoke(RemotingCommand request, int proc, String f, Map<String, Object> v) {
        synchronized (lock) {
            add(proc, "invoke", f, v);
            start(request, new Pending(new int[] {proc}, f));
        }
    }

    private final Map<String, Integer> groupProcesses = new HashMap<>();

    /** A HEART_BEAT registers each producer group it names (Heartbeat(group, online) per group, each group
     *  and sending thread its own process so that the operations of one request may be in flight together); an
     *  UNREGISTER_CLIENT takes one off. */
    private void heartbeat(RemotingCommand request, List<String> groups, List<String> consumers, boolean online) {
        int[] procs = new int[groups.size() + consumers.size()];
        synchronized (lock) {
            for (int i = 0; i < procs.length; i++) {
                boolean consumer = i >= groups.size();
                String g = consumer ? consumers.get(i - groups.size()) : groups.get(i);
                // per calling thread too: two client instances (a producer's, a consumer's) both register
                // CLIENT_INNER_PRODUCER, each from its own heartbeat thread (the threads' names are the same)
                String key = Thread.currentThread().getId() + "/" + (consumer ? "consumer:" : "") + g;
                procs[i] = groupProcesses.computeIfAbsent(key, k -> 300 + groupProcesses.size());
                Map<String, Object> args = new LinkedHashMap<>();
                args.put("group", g);
                args.put("online", online);
                if (consumer) {
                    // a consumer's heartbeat makes the broker create %RETRY%<group> (ClientManageProcessor.heartBeat)
                    args.put("consumer", true);
                }
                add(procs[i], "invoke", "heartbeat", args);
            }
            start(request, new Pending(procs, "heartbeat"));
        }
    }

    private void after(RemotingCommand request, RemotingCommand response) {
        if (request.getCode() == CHECK_TRANSACTION_STATE) {
            return;
        }
        Pending p = finish(request);
        if (p == null) {
            return;
        }
        if (response == null) {
            Map<String, Object> v = new LinkedHashMap<>();
            v.put("error", "no response");
            synchronized (lock) {
                for (int proc : p.processes) {
                    add(proc, "info", p.f, v);
                }
            }
            return;
        }
        Map<String, Object> r = responseJson(request.getCode(), response);
        String type = response.getCode() == 0 || "pull".equals(p.f) ? "ok" : "fail";
        synchronized (lock) {
            for (int proc : p.processes) {
                add(proc, type, p.f, r);
            }
        }
    }

    private Map<String, Object> responseJson(int code, RemotingCommand response) {
        Map<String, String> x = response.getExtFields() == null ? Map.of() : response.getExtFields();
        Map<String, Object> fields = new LinkedHashMap<>();
        List<Object> records = new ArrayList<>();
        switch (code) {
            case SEND_MESSAGE:
            case SEND_MESSAGE_V2:
                if (x.containsKey("queueId")) {
                    fields.put("queue_id", num(x.get("queueId")));
                }
                if (x.containsKey("queueOffset")) {
                    fields.put("queue_offset", num(x.get("queueOffset")));
                }
                if (x.containsKey("msgId")) {
                    fields.put("msg_id", x.get("msgId"));
                }
                break;
            case PULL_MESSAGE:
                for (String[] k : new String[][] {
                    {"nextBeginOffset", "next_begin_offset"}, {"minOffset", "min_offset"}, {"maxOffset", "max_offset"}
                }) {
                    if (x.containsKey(k[0])) {
                        fields.put(k[1], num(x.get(k[0])));
                    }
                }
                if (response.getCode() == 0 && response.getBody() != null) {
                    ByteBuffer buf = ByteBuffer.wrap(response.getBody());
                    while (buf.hasRemaining()) {
                        MessageExt m = MessageDecoder.decode(buf, true, false, false);
                        if (m == null) {
                            break;
                        }
                        records.add(record(m));
                    }
                }
                break;
            case GET_MAX_OFFSET:
                if (x.containsKey("offset")) {
                    fields.put("offset", num(x.get("offset")));
                }
                break;
            case VIEW_MESSAGE_BY_ID:
                if (response.getCode() == 0 && response.getBody() != null) {
                    MessageExt m = MessageDecoder.decode(ByteBuffer.wrap(response.getBody()), true, false, false);
                    if (m != null) {
                        records.add(record(m));
                    }
                }
                break;
            default:
                break;
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("code", response.getCode());
        r.put("remark", response.getRemark());
        r.put("fields", fields);
        r.put("records", records);
        r.put("no_response", false);
        return r;
    }

    private static Map<String, Object> noResponse() {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("code", 0);
        r.put("remark", null);
        r.put("fields", new LinkedHashMap<>());
        r.put("records", new ArrayList<>());
        r.put("no_response", true);
        return r;
    }

    private void recordCheck(RemotingCommand request) {
        Map<String, String> h = request.getExtFields() == null ? Map.of() : request.getExtFields();
        if (request.getBody() == null) {
            skip("check without a body");
            return;
        }
        MessageExt m = MessageDecoder.decode(ByteBuffer.wrap(request.getBody()), true, false, false);
        if (m == null) {
            skip("check whose body does not decode");
            return;
        }
        Map<String, Object> v = new LinkedHashMap<>();
        String group = m.getProperty("PGROUP");
        v.put("group", group == null ? "" : group);
        v.put("table_offset", num(h.get("tranStateTableOffset")));
        v.put("commit_log_offset", num(h.get("commitLogOffset")));
        v.put("message", record(m));
        add(-1, "ok", "check", v);
    }

    // --- what a request carries -----------------------------------------------------------------------

    /** The request's header as it goes on the wire: its custom header's fields (what makeCustomHeaderToNet
     *  puts into extFields), read without changing the request. */
    private static Map<String, String> header(RemotingCommand request) {
        Map<String, String> h = new HashMap<>();
        if (request.getExtFields() != null) {
            h.putAll(request.getExtFields());
        }
        Object custom = request.readCustomHeader();
        for (Class<?> c = custom == null ? null : custom.getClass(); c != null && c != Object.class; c = c.getSuperclass()) {
            for (Field fld : c.getDeclaredFields()) {
                if (Modifier.isStatic(fld.getModifiers()) || fld.getName().startsWith("this")) {
                    continue;
                }
                try {
                    fld.setAccessible(true);
                    Object v = fld.get(custom);
                    if (v != null) {
                        h.putIfAbsent(fld.getName(), v.toString());
                    }
                } catch (ReflectiveOperationException | RuntimeException e) {
                    // a field Java will not let us read is not one of the wire's
                }
            }
        }
        return h;
    }

    private Map<String, Object> send(Map<String, String> h, RemotingCommand request) {
        Map<String, Object> v = new LinkedHashMap<>();
        v.put("topic", str(h, "b", "topic"));
        v.putAll(body(request.getBody()));
        Map<String, String> props = MessageDecoder.string2messageProperties(str(h, "i", "properties"));
        v.put("properties", new TreeMap<>(props));
        v.put("queue", num(str(h, "e", "queueId")));
        v.put("sys_flag", num(str(h, "f", "sysFlag")));
        v.put("flag", num(str(h, "h", "flag")));
        v.put("born_timestamp", optNum(str(h, "g", "bornTimestamp")));
        v.put("born_host", localHost(producerClient, brokerAddr));
        v.put("group", str(h, "a", "producerGroup"));
        v.put("reconsume_times", optNum(str(h, "j", "reconsumeTimes")));
        v.put("max_reconsume_times", optNum(str(h, "l", "maxReconsumeTimes")));
        v.put("default_topic_queue_nums", num(str(h, "d", "defaultTopicQueueNums")));
        v.put("version", request.getVersion());
        v.put("queue_choice", 0);
        return v;
    }

    private static String str(Map<String, String> h, String v2, String v1) {
        String s = h.get(v2);
        return s != null ? s : h.get(v1);
    }

    private static long num(String s) {
        if (s == null) {
            throw new IllegalArgumentException("a header field the history needs is missing");
        }
        return Long.parseLong(s);
    }

    private static Long optNum(String s) {
        return s == null ? null : Long.parseLong(s);
    }

    private static final Pattern PRODUCER_SET = Pattern.compile("\"producerDataSet\"\\s*:\\s*\\[(.*?)\\]");
    private static final Pattern GROUP_NAME = Pattern.compile("\"groupName\"\\s*:\\s*\"([^\"]*)\"");

    /** The producer groups a HEART_BEAT body (HeartbeatData as JSON) registers. */
    static List<String> producerGroups(String body) {
        List<String> out = new ArrayList<>();
        Matcher set = PRODUCER_SET.matcher(body);
        if (set.find()) {
            Matcher g = GROUP_NAME.matcher(set.group(1));
            while (g.find()) {
                out.add(g.group(1));
            }
        }
        out.sort(null);
        return out;
    }

    /** The consumer groups a HEART_BEAT body registers: the groupName of each entry of its consumerDataSet
     *  (fastjson writes the fields in name order, so the set ends where producerDataSet begins). */
    static List<String> consumerGroups(String body) {
        List<String> out = new ArrayList<>();
        int from = body.indexOf("\"consumerDataSet\"");
        if (from < 0) {
            return out;
        }
        int to = body.indexOf("\"producerDataSet\"", from);
        Matcher g = GROUP_NAME.matcher(to > from ? body.substring(from, to) : body.substring(from));
        while (g.find()) {
            out.add(g.group(1));
        }
        out.sort(null);
        return out;
    }

    /** The client's end of its connection to ``addr`` (the born host a broker stores), read from the
     *  remoting client's channel table; the broker's view of it is the same address. */
    private static List<Object> localHost(Object client, String addr) {
        if (client != null) {
            try {
                Field f = client.getClass().getDeclaredField("channelTables");
                f.setAccessible(true);
                Object wrapper = ((Map<?, ?>) f.get(client)).get(addr);
                if (wrapper != null) {
                    Method gf = wrapper.getClass().getDeclaredMethod("getChannelFuture");
                    gf.setAccessible(true);
                    Object future = gf.invoke(wrapper);
                    Method ch = future.getClass().getMethod("channel");
                    ch.setAccessible(true);
                    Object channel = ch.invoke(future);
                    Method la = channel.getClass().getMethod("localAddress");
                    la.setAccessible(true);
                    SocketAddress sa = (SocketAddress) la.invoke(channel);
                    if (sa instanceof InetSocketAddress) {
                        return host((InetSocketAddress) sa);
                    }
                }
            } catch (ReflectiveOperationException | RuntimeException e) {
                // fall through: unknown, the codec's default
            }
        }
        List<Object> fallback = new ArrayList<>();
        fallback.add("127.0.0.1");
        fallback.add(50000);
        return fallback;
    }

    private static List<Object> host(SocketAddress a) {
        List<Object> out = new ArrayList<>();
        InetSocketAddress i = (InetSocketAddress) a;
        out.add(i.getAddress().getHostAddress());
        out.add(i.getPort());
        return out;
    }

    static Map<String, Object> body(byte[] body) {
        Map<String, Object> v = new LinkedHashMap<>();
        byte[] b = body == null ? new byte[0] : body;
        java.nio.charset.CharsetDecoder dec = StandardCharsets.UTF_8.newDecoder();
        try {
            v.put("body", dec.decode(ByteBuffer.wrap(b)).toString());
        } catch (java.nio.charset.CharacterCodingException e) {
            v.put("body_base64", Base64.getEncoder().encodeToString(b));
        }
        return v;
    }

    /** A stored record as rmqspec's codec writes it (conformance/codec.py record_to_json). */
    static Map<String, Object> record(MessageExt m) {
        Map<String, Object> v = new LinkedHashMap<>();
        v.put("topic", m.getTopic());
        v.put("queue_id", m.getQueueId());
        v.put("queue_offset", m.getQueueOffset());
        v.put("commit_log_offset", m.getCommitLogOffset());
        v.put("size", m.getStoreSize());
        v.put("sys_flag", m.getSysFlag());
        v.put("flag", m.getFlag());
        v.putAll(body(m.getBody()));
        v.put("properties", new TreeMap<>(m.getProperties() == null ? Map.of() : m.getProperties()));
        v.put("born_timestamp", m.getBornTimestamp());
        v.put("store_timestamp", m.getStoreTimestamp());
        v.put("born_host", host(m.getBornHost()));
        v.put("store_host", host(m.getStoreHost()));
        v.put("reconsume_times", m.getReconsumeTimes());
        v.put("prepared_transaction_offset", m.getPreparedTransactionOffset());
        v.put("msg_id", m.getMsgId());
        return v;
    }

    // --- the history ----------------------------------------------------------------------------------

    /** One event, its time read under the lock: times are in the order of the events. */
    private void add(int process, String type, String f, Map<String, Object> value) {
        synchronized (lock) {
            long time = now();
            Map<String, Object> e = new LinkedHashMap<>();
            e.put("index", (long) lines.size());
            e.put("process", process);
            e.put("type", type);
            e.put("f", f);
            e.put("value", value);
            e.put("time", time);
            lines.add(Json.write(e));
        }
    }
}
