package io.github.lakehouse.json;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.LocalDate;
import java.time.ZoneId;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Pattern;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.catalyst.util.SparkDateTimeUtils$;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;

/**
 * One JSON object into the declared fields, each token checked against its field's type
 * without coercion. The rules are those ingestion/formats/strict_json.py documents (and its tests pin):
 *
 * <ul>
 *   <li>string: a JSON string only;
 *   <li>long: a JSON integer that fits; double: a JSON number, or "NaN", "Infinity", "-Infinity"
 *       (and "+INF", "+Infinity", "-INF") as Spark's JSON reader takes them; boolean: true or false;
 *   <li>date-time: a string that starts like an ISO 8601 date, parsed by Spark's cast (the
 *       session time zone for a text without offset); date: a string that is an ISO 8601 date;
 *   <li>decimal: a JSON number without exponent or a string of digits, that fits the declared
 *       precision and scale without rounding.
 * </ul>
 * A JSON null is a null, never wrong. Of a key given twice, the last occurrence counts.
 */
final class RecordDecoder {
    private enum Kind { STRING, LONG, DOUBLE, BOOLEAN, TIMESTAMP, DATE, DECIMAL }

    // What Spark's JSON functions accept as an object: JSON, with single quotes allowed (Spark's
    // default), without comments, NaN tokens, leading zeros or unescaped control characters.
    private static final JsonFactory FACTORY = JsonFactory.builder().enable(JsonReadFeature.ALLOW_SINGLE_QUOTES).build();
    private static final Pattern ISO_DATE_START = Pattern.compile("^[0-9]{4}-[0-9]{2}-[0-9]{2}");
    private static final Pattern ISO_DATE = Pattern.compile("^[0-9]{4}-[0-9]{2}-[0-9]{2}$");
    private static final Pattern DECIMAL_TEXT = Pattern.compile("^[+-]?[0-9]+(\\.([0-9]*))?$");
    private static final int MAX_DECIMAL_PRECISION = 38;
    private static final Object WRONG = new Object();
    private static final Row NOT_AN_OBJECT = RowFactory.create(null, true, null, false);

    private final StructType declared;
    private final String[] names;
    private final Kind[] kinds;
    private final DecimalType[] decimals;
    private final Map<String, Integer> index = new HashMap<>();
    private final ZoneId zone;

    RecordDecoder(StructType declared, String zone) {
        this.declared = declared;
        this.zone = ZoneId.of(zone, ZoneId.SHORT_IDS);
        StructField[] fields = declared.fields();
        names = new String[fields.length];
        kinds = new Kind[fields.length];
        decimals = new DecimalType[fields.length];
        for (int i = 0; i < fields.length; i++) {
            names[i] = fields[i].name();
            kinds[i] = kindOf(fields[i]);
            if (kinds[i] == Kind.DECIMAL) {
                decimals[i] = (DecimalType) fields[i].dataType();
            }
            index.put(names[i], i);
        }
    }

    static StructType resultType(StructType declared) {
        return new StructType()
                .add("payload", declared, true)
                .add("not_object", DataTypes.BooleanType, false)
                .add("wrong_fields", DataTypes.StringType, true)
                .add("undeclared", DataTypes.BooleanType, false);
    }

    StructType declared() {
        return declared;
    }

    private static Kind kindOf(StructField field) {
        DataType type = field.dataType();
        if (type instanceof StringType) return Kind.STRING;
        if (type instanceof LongType) return Kind.LONG;
        if (type instanceof DoubleType) return Kind.DOUBLE;
        if (type instanceof BooleanType) return Kind.BOOLEAN;
        if (type instanceof TimestampType) return Kind.TIMESTAMP;
        if (type instanceof DateType) return Kind.DATE;
        if (type instanceof DecimalType) return Kind.DECIMAL;
        throw new IllegalArgumentException("field " + field.name() + ": type " + type.simpleString()
                + " is not supported by the JSON decoder");
    }

    Row decode(byte[] value) {
        if (value == null || startsWithByteOrderMark(value)) {  // Spark reads no UTF-8 BOM either
            return NOT_AN_OBJECT;
        }
        try (JsonParser parser = FACTORY.createParser(value)) {
            return read(parser);
        } catch (IOException bytesFailed) {
            // Perhaps only bytes that are not UTF-8: Spark reads a string column with each such
            // byte replaced (U+FFFD), and so does new String(...). Anything else fails again.
            try (JsonParser parser = FACTORY.createParser(new String(value, StandardCharsets.UTF_8))) {
                return read(parser);
            } catch (IOException e) {
                return NOT_AN_OBJECT;
            }
        }
    }

    private static boolean startsWithByteOrderMark(byte[] value) {
        return value.length >= 3 && value[0] == (byte) 0xEF && value[1] == (byte) 0xBB && value[2] == (byte) 0xBF;
    }

    private Row read(JsonParser parser) throws IOException {
        if (parser.nextToken() != JsonToken.START_OBJECT) {
            return NOT_AN_OBJECT;
        }
        Object[] values = new Object[names.length];
        boolean[] wrong = null;
        boolean undeclared = false;
        JsonToken token;
        while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
            Integer i = index.get(parser.currentName());
            JsonToken valueToken = parser.nextToken();
            if (i == null) {
                undeclared = true;
                parser.skipChildren();
                continue;
            }
            Object converted = valueToken == JsonToken.VALUE_NULL ? null : convert(kinds[i], i, valueToken, parser);
            if (converted == WRONG) {
                parser.skipChildren();
                if (wrong == null) {
                    wrong = new boolean[names.length];
                }
                wrong[i] = true;
                values[i] = null;
            } else {
                if (wrong != null) {
                    wrong[i] = false;
                }
                values[i] = converted;
            }
        }
        if (token != JsonToken.END_OBJECT) {  // Jackson throws first; kept as a guard
            return NOT_AN_OBJECT;
        }
        return RowFactory.create(RowFactory.create(values), false, wrongFields(wrong), undeclared);
    }

    private String wrongFields(boolean[] wrong) {
        if (wrong == null) {
            return null;
        }
        StringBuilder names = new StringBuilder();
        for (int i = 0; i < wrong.length; i++) {
            if (wrong[i]) {
                names.append(names.length() == 0 ? "" : ", ").append(this.names[i]);
            }
        }
        return names.length() == 0 ? null : names.toString();
    }

    private Object convert(Kind kind, int i, JsonToken token, JsonParser parser) throws IOException {
        switch (kind) {
            case STRING:
                return token == JsonToken.VALUE_STRING ? parser.getText() : WRONG;
            case LONG:
                if (token != JsonToken.VALUE_NUMBER_INT || parser.getNumberType() == JsonParser.NumberType.BIG_INTEGER) {
                    return WRONG;
                }
                return parser.getLongValue();
            case DOUBLE:
                return doubleOf(token, parser);
            case BOOLEAN:
                return token == JsonToken.VALUE_TRUE ? Boolean.TRUE : token == JsonToken.VALUE_FALSE ? Boolean.FALSE : WRONG;
            case TIMESTAMP:
                return token == JsonToken.VALUE_STRING ? timestampOf(parser.getText()) : WRONG;
            case DATE:
                return token == JsonToken.VALUE_STRING ? dateOf(parser.getText()) : WRONG;
            case DECIMAL:
                return decimalOf(token, parser, decimals[i]);
            default:
                throw new IllegalStateException(kind.name());
        }
    }

    private static Object doubleOf(JsonToken token, JsonParser parser) throws IOException {
        if (token == JsonToken.VALUE_NUMBER_INT || token == JsonToken.VALUE_NUMBER_FLOAT) {
            return parser.getDoubleValue();
        }
        if (token != JsonToken.VALUE_STRING) {
            return WRONG;
        }
        switch (parser.getText()) {
            case "NaN":
                return Double.NaN;
            case "+INF": case "+Infinity": case "Infinity":
                return Double.POSITIVE_INFINITY;
            case "-INF": case "-Infinity":
                return Double.NEGATIVE_INFINITY;
            default:
                return WRONG;
        }
    }

    private Object timestampOf(String text) {
        if (!ISO_DATE_START.matcher(text).find()) {
            return WRONG;
        }
        Option<Object> micros = SparkDateTimeUtils$.MODULE$.stringToTimestamp(UTF8String.fromString(text), zone);
        if (micros.isEmpty()) {
            return WRONG;
        }
        long value = (Long) micros.get();
        // Instant, not java.sql.Timestamp: Spark takes it as is, with no calendar rebasing.
        return Instant.ofEpochSecond(Math.floorDiv(value, 1_000_000L), Math.floorMod(value, 1_000_000L) * 1_000L);
    }

    private static Object dateOf(String text) {
        if (!ISO_DATE.matcher(text).find()) {
            return WRONG;
        }
        Option<Object> days = SparkDateTimeUtils$.MODULE$.stringToDate(UTF8String.fromString(text));
        return days.isEmpty() ? WRONG : LocalDate.ofEpochDay((Integer) days.get());
    }

    private static Object decimalOf(JsonToken token, JsonParser parser, DecimalType declared) throws IOException {
        String text;
        if (token == JsonToken.VALUE_STRING) {
            text = parser.getText();
        } else if (token == JsonToken.VALUE_NUMBER_INT || token == JsonToken.VALUE_NUMBER_FLOAT) {
            // A number with an exponent, or of more than 38 digits, is a double to Spark's JSON
            // reader, never a decimal.
            text = parser.getText();
            if (text.indexOf('e') >= 0 || text.indexOf('E') >= 0
                    || new BigDecimal(text).precision() > MAX_DECIMAL_PRECISION) {
                return WRONG;
            }
        } else {
            return WRONG;
        }
        var digits = DECIMAL_TEXT.matcher(text);
        if (!digits.find()) {
            return WRONG;
        }
        String fraction = digits.group(2) == null ? "" : digits.group(2);
        for (int d = declared.scale(); d < fraction.length(); d++) {
            if (fraction.charAt(d) != '0') {
                return WRONG;  // a digit beyond the scale: the value would be rounded
            }
        }
        BigDecimal value = new BigDecimal(text.strip()).setScale(declared.scale(), RoundingMode.HALF_UP);
        return value.precision() - value.scale() > declared.precision() - declared.scale() ? WRONG : value;
    }
}
