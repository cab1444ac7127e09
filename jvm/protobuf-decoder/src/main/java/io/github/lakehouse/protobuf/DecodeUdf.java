package io.github.lakehouse.protobuf;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF1;

/** The registered function. Serialized to executors with the descriptor set as plain bytes. */
final class DecodeUdf implements UDF1<byte[], Row> {
    private static final long serialVersionUID = 1L;

    private final byte[] descriptorSet;
    private final String messageName;
    // Descriptors are not serializable; each deserialized copy looks its decoder up once.
    private transient volatile MessageDecoder decoder;

    DecodeUdf(byte[] descriptorSet, String messageName) {
        this.descriptorSet = descriptorSet.clone();
        this.messageName = messageName;
    }

    MessageDecoder decoder() {
        MessageDecoder current = decoder;
        if (current == null) {
            current = decoder = MessageDecoder.of(descriptorSet, messageName);
        }
        return current;
    }

    @Override
    public Row call(byte[] value) {
        return decoder().decode(value);
    }
}
