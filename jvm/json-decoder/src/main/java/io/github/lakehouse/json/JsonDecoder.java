package io.github.lakehouse.json;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * Decodes JSON objects into Spark rows of their declared fields, in one parse per record.
 *
 * <p>Stands in for {@code from_json} plus {@code json_object_keys} plus the VARIANT-based type
 * checks of ingestion/formats/strict_json.py, which together read every record three ways (benchmarks/
 * RESULTS.md: 42% of the JSON stream's CPU in parsing, half of the rest in Spark's expression
 * helpers). The checks are the same: a token of the wrong JSON type is never coerced (a number
 * is no date-time, an object no string), and date-times and dates are parsed by Spark's own
 * cast. Bad input never fails a task.
 *
 * <p>Result struct: {@code struct<payload: struct<...declared fields...>, not_object: boolean,
 * wrong_fields: string, undeclared: boolean>}: {@code not_object} when the bytes are not one
 * JSON object; {@code wrong_fields} the comma-separated fields whose token did not fit (null if
 * none); {@code undeclared} when the object has a key the schema does not declare.
 */
public final class JsonDecoder {
    private JsonDecoder() {}

    /** The result struct for {@code declaredJson} (a StructType's JSON), as Spark's DataType JSON. */
    public static String sparkSchemaJson(String declaredJson) {
        return RecordDecoder.resultType(declared(declaredJson)).json();
    }

    /**
     * Registers {@code udfName(value binary)} returning the result struct; replaces any function
     * of that name (a new schema). Date-times without an offset are read in the session's time
     * zone, as Spark's cast reads them.
     */
    public static void register(SparkSession spark, String udfName, String declaredJson) {
        String zone = spark.conf().get("spark.sql.session.timeZone");
        DecodeUdf udf = new DecodeUdf(declaredJson, zone);
        // Built here first: an unsupported field type fails now, on the driver.
        spark.udf().register(udfName, udf, RecordDecoder.resultType(udf.decoder().declared()));
    }

    static StructType declared(String declaredJson) {
        DataType type = DataType.fromJson(declaredJson);
        if (!(type instanceof StructType)) {
            throw new IllegalArgumentException("the declared schema is not a struct: " + type.simpleString());
        }
        return (StructType) type;
    }
}
