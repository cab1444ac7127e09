package io.github.lakehouse.json;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF1;

/** The registered function. Serialized to executors with the schema as its JSON text. */
final class DecodeUdf implements UDF1<byte[], Row> {
    private static final long serialVersionUID = 1L;

    private final String declaredJson;
    private final String zone;
    // Built once per deserialized copy.
    private transient volatile RecordDecoder decoder;

    DecodeUdf(String declaredJson, String zone) {
        this.declaredJson = declaredJson;
        this.zone = zone;
    }

    RecordDecoder decoder() {
        RecordDecoder current = decoder;
        if (current == null) {
            current = decoder = new RecordDecoder(JsonDecoder.declared(declaredJson), zone);
        }
        return current;
    }

    @Override
    public Row call(byte[] value) {
        return decoder().decode(value);
    }
}
