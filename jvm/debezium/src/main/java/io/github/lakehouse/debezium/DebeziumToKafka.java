package io.github.lakehouse.debezium;

import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import javax.management.JMException;
import javax.management.MBeanServer;
import javax.management.MalformedObjectNameException;
import javax.management.ObjectName;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.storage.Converter;

/**
 * One Debezium connector in the embedded engine, its change events written to Kafka: what
 * Debezium Server with its Kafka sink does, in one small class on the connectors' own jars.
 *
 * <pre>java -cp '&lt;jars&gt;/debezium/*' io.github.lakehouse.debezium.DebeziumToKafka connector.properties</pre>
 *
 * The properties file holds the engine's and the connector's properties as Debezium documents
 * them (name, connector.class, offset.storage.file.filename, topic.prefix, database.*,
 * transforms...), plus:
 * <ul>
 *   <li>{@code kafka.*}: the producer's properties without the prefix ({@code kafka.bootstrap.servers}
 *       at least);</li>
 *   <li>{@code key.converter}, {@code value.converter} and their {@code .*} settings, as in a
 *       Kafka Connect worker; by default Kafka's JsonConverter with {@code schemas.enable=false}
 *       (the schemaless JSON the pipeline's {@code debezium} format reads).</li>
 * </ul>
 *
 * Delivery is at least once, in the connector's order per key: a batch's offsets are committed
 * only after every record of it is acknowledged by the broker (acks=all, idempotent producer),
 * so a crash re-sends, never loses. Kafka rejecting a record stops the engine and the process
 * exits 1; SIGTERM stops it cleanly (offsets committed) with exit code 0.
 */
public final class DebeziumToKafka {

    private static final String KAFKA_PREFIX = "kafka.";
    private static final long STOP_TIMEOUT_S = 60;

    private DebeziumToKafka() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: DebeziumToKafka <connector.properties>");
            System.exit(2);
        }
        Properties config = load(args[0]);
        Converter keys = converter(config, "key.converter", true);
        Converter values = converter(config, "value.converter", false);
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerConfig(config));

        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch stopped = new CountDownLatch(1);
        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine = DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
                .using(engineConfig(config))
                .using((success, message, error) -> {
                    if (!success) {
                        failure.compareAndSet(null, error != null ? error : new IllegalStateException(message));
                    }
                    System.out.println("debezium: engine stopped: " + message);
                    stopped.countDown();
                })
                .using(new DebeziumEngine.ConnectorCallback() {
                    @Override
                    public void pollingStarted() {
                        System.out.println("debezium: polling started");
                    }
                })
                .notifying(new KafkaWriter(producer, keys, values))
                .build();

        ExecutorService runner = Executors.newSingleThreadExecutor();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                engine.close();
                stopped.await(STOP_TIMEOUT_S, TimeUnit.SECONDS);
            } catch (IOException | InterruptedException | RuntimeException e) {
                // already stopped on its own (a failure), or it did not stop in time
                System.err.println("debezium: stopping: " + e);
            }
            System.out.flush();
            // halt, or the JVM would exit with 143 after a SIGTERM however cleanly the engine stopped
            Runtime.getRuntime().halt(failure.get() == null ? 0 : 1);
        }));
        runner.submit(engine);
        announceStreaming(stopped);
        stopped.await();
        producer.close();
        Throwable error = failure.get();
        if (error != null) {
            System.err.println("error: Debezium stopped: " + error);
            error.printStackTrace();
        }
        // runs the hook above, which exits with 0 or 1
        System.exit(error == null ? 0 : 1);
    }

    /** Sends a batch, waits until the broker has acknowledged all of it, then commits its offsets. */
    private static final class KafkaWriter implements DebeziumEngine.ChangeConsumer<RecordChangeEvent<SourceRecord>> {
        private final KafkaProducer<byte[], byte[]> producer;
        private final Converter keys;
        private final Converter values;

        KafkaWriter(KafkaProducer<byte[], byte[]> producer, Converter keys, Converter values) {
            this.producer = producer;
            this.keys = keys;
            this.values = values;
        }

        @Override
        public void handleBatch(List<RecordChangeEvent<SourceRecord>> batch,
                                DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer)
                throws InterruptedException {
            List<Future<RecordMetadata>> sent = new ArrayList<>(batch.size());
            for (RecordChangeEvent<SourceRecord> event : batch) {
                SourceRecord record = event.record();
                String topic = record.topic();
                byte[] key = keys.fromConnectData(topic, record.keySchema(), record.key());
                // a null value stays null: the tombstone after a delete, for log compaction
                byte[] value = record.value() == null ? null
                        : values.fromConnectData(topic, record.valueSchema(), record.value());
                sent.add(producer.send(new ProducerRecord<>(topic, record.kafkaPartition(), key, value)));
            }
            producer.flush();
            for (Future<RecordMetadata> acknowledgement : sent) {
                try {
                    acknowledgement.get();
                } catch (java.util.concurrent.ExecutionException e) {
                    // not committing the batch: the engine stops, and a restart re-sends it
                    throw new IllegalStateException("Kafka did not take a change event: " + e.getCause(), e.getCause());
                }
            }
            for (RecordChangeEvent<SourceRecord> event : batch) {
                committer.markProcessed(event);
            }
            committer.markBatchFinished();
        }

        @Override
        public boolean supportsTombstoneEvents() {
            return true;
        }
    }

    /**
     * Prints "debezium: streaming" once the connector has finished its snapshot (if any) and
     * reads the log: what a caller waits for before it changes the database and expects to
     * see the change as streamed, not as a snapshot read. Debezium's streaming metrics say so
     * (their Connected attribute, set once the snapshot is over).
     */
    private static void announceStreaming(CountDownLatch stopped) throws InterruptedException {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        ObjectName streaming;
        try {
            streaming = new ObjectName("debezium.*:type=connector-metrics,context=streaming,*");
        } catch (MalformedObjectNameException e) {
            throw new IllegalStateException(e);
        }
        while (!stopped.await(200, TimeUnit.MILLISECONDS)) {
            for (ObjectName name : server.queryNames(streaming, null)) {
                try {
                    if (Boolean.TRUE.equals(server.getAttribute(name, "Connected"))) {
                        System.out.println("debezium: streaming");
                        return;
                    }
                } catch (JMException e) {
                    // registered but not readable yet: ask again
                }
            }
        }
    }

    private static Properties load(String path) throws IOException {
        Properties config = new Properties();
        try (InputStream in = new FileInputStream(path)) {
            config.load(in);
        }
        return config;
    }

    /** The engine's and connector's properties: everything but the producer's and the converters'. */
    private static Properties engineConfig(Properties config) {
        Properties engine = new Properties();
        for (String name : config.stringPropertyNames()) {
            if (!name.startsWith(KAFKA_PREFIX) && !name.startsWith("key.converter") && !name.startsWith("value.converter")) {
                engine.setProperty(name, config.getProperty(name));
            }
        }
        return engine;
    }

    private static Map<String, Object> producerConfig(Properties config) {
        Map<String, Object> producer = new HashMap<>();
        producer.put(ProducerConfig.ACKS_CONFIG, "all");
        producer.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        producer.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        producer.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        for (String name : config.stringPropertyNames()) {
            if (name.startsWith(KAFKA_PREFIX)) {
                producer.put(name.substring(KAFKA_PREFIX.length()), config.getProperty(name));
            }
        }
        if (!producer.containsKey(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG)) {
            throw new IllegalArgumentException("kafka.bootstrap.servers is not set");
        }
        return producer;
    }

    private static Converter converter(Properties config, String prefix, boolean isKey) throws ReflectiveOperationException {
        String className = config.getProperty(prefix, JsonConverter.class.getName());
        Converter converter = (Converter) Class.forName(className).getDeclaredConstructor().newInstance();
        Map<String, Object> settings = new HashMap<>();
        settings.put("schemas.enable", "false");
        for (String name : config.stringPropertyNames()) {
            if (name.startsWith(prefix + ".")) {
                settings.put(name.substring(prefix.length() + 1), config.getProperty(name));
            }
        }
        converter.configure(settings, isKey);
        return converter;
    }
}
