package io.github.lakehouse.protobuf;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import scala.Function1;
import scala.collection.immutable.Seq;

/**
 * Decodes Protobuf message bytes into Spark rows, with a descriptor set read at run time.
 *
 * <p>Stands in for spark-protobuf's {@code from_protobuf}, which the reachable Maven registry
 * does not serve. Bad input never fails a task: it yields a null payload and an error code
 * ({@link #CORRUPT_PAYLOAD}, or {@link #SCHEMA_MISMATCH} for a field of the wrong wire type).
 *
 * <p>Result struct: {@code struct<payload: struct<...>, error_code: string, error_detail: string>}.
 */
public final class ProtobufDecoder {
    public static final String CORRUPT_PAYLOAD = "CORRUPT_PAYLOAD";
    /** A field came with a wire type its declared type cannot take (the producer changed its type). */
    public static final String SCHEMA_MISMATCH = "SCHEMA_MISMATCH";

    private ProtobufDecoder() {}

    /** The result struct as Spark's DataType JSON (pyspark: {@code StructType.fromJson(json.loads(s))}). */
    public static String sparkSchemaJson(byte[] descriptorSet, String messageName) {
        return MessageDecoder.of(descriptorSet, messageName).resultType().json();
    }

    /**
     * Registers {@code udfName(value binary)} in the session, returning the result struct (a
     * {@link DecodeExpression}); replaces any function of that name.
     */
    public static void register(SparkSession spark, String udfName, byte[] descriptorSet, String messageName) {
        byte[] descriptors = descriptorSet.clone();
        // Built here first: a bad descriptor or message name fails now, on the driver.
        MessageDecoder.of(descriptors, messageName);
        Function1<Seq<Expression>, Expression> builder = arguments -> {
            if (arguments.size() != 1) {
                throw new IllegalArgumentException(udfName + " takes one argument (the message bytes), not "
                        + arguments.size());
            }
            return new DecodeExpression(arguments.apply(0), udfName, descriptors, messageName);
        };
        ExpressionInfo info = new ExpressionInfo(DecodeExpression.class.getName(), null, udfName,
                "_FUNC_(value) - the Protobuf message " + messageName + " in value, as struct<payload, error_code, error_detail>",
                "", "", "", "", "", "", "java_udf");
        ((org.apache.spark.sql.classic.SparkSession) spark).sessionState().functionRegistry()
                .registerFunction(FunctionIdentifier.apply(udfName), info, builder);
    }
}
