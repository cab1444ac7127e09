package io.github.lakehouse.protobuf;

import org.apache.spark.sql.SparkSession;

/**
 * Decodes Protobuf message bytes into Spark rows, with a descriptor set read at run time.
 *
 * <p>Stands in for spark-protobuf's {@code from_protobuf}, which the reachable Maven registry
 * does not serve. Bad input never fails a task: it yields a null payload and an error code.
 *
 * <p>Result struct: {@code struct<payload: struct<...>, error_code: string, error_detail: string>}.
 */
public final class ProtobufDecoder {
    public static final String CORRUPT_PAYLOAD = "CORRUPT_PAYLOAD";

    private ProtobufDecoder() {}

    /** The result struct as Spark's DataType JSON (pyspark: {@code StructType.fromJson(json.loads(s))}). */
    public static String sparkSchemaJson(byte[] descriptorSet, String messageName) {
        return MessageDecoder.of(descriptorSet, messageName).resultType().json();
    }

    /**
     * Registers {@code udfName(value binary)} returning the result struct; replaces any function
     * of that name (a new descriptor after a schema change).
     */
    public static void register(SparkSession spark, String udfName, byte[] descriptorSet, String messageName) {
        DecodeUdf udf = new DecodeUdf(descriptorSet, messageName);
        // Built here first: a bad descriptor or message name fails now, on the driver.
        spark.udf().register(udfName, udf, udf.decoder().resultType());
    }
}
