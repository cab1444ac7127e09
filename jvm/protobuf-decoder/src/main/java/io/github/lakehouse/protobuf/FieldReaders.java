package io.github.lakehouse.protobuf;

import com.google.protobuf.ByteString;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.EnumDescriptor;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.WireFormat;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Readers of one occurrence of a field on the wire, each with the Spark type of what it
 * yields: the schema and the rows come from the same objects, so they cannot disagree.
 *
 * <p>Values are yielded as Spark holds them inside a row (its "internal" forms): text as
 * {@link UTF8String}, a timestamp as microseconds since the epoch, numbers boxed, bytes as
 * byte[]. So Spark takes the decoded row as it is, with no conversion per field
 * ({@link DecodeExpression}).
 */
final class FieldReaders {
    private FieldReaders() {}

    /** Returned by {@link FieldReader#read} for a value the field does not take (a closed enum's unknown number). */
    static final Object SKIP = new Object();

    // Timestamp.proto's valid range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
    private static final long MIN_SECONDS = -62_135_596_800L;
    private static final long MAX_SECONDS = 253_402_300_799L;

    /** A value Spark cannot hold (a timestamp out of range): the message counts as corrupt. */
    static final class BadValue extends RuntimeException {
        BadValue(String message) {
            super(message, null, false, false); // no stack trace: thrown per bad row
        }

        /** The same problem, one field further out: "team.start_date: ...". */
        BadValue at(String field) {
            String message = getMessage();
            return new BadValue(field + (message.startsWith(":") ? "" : ".") + message);
        }
    }

    /**
     * A field of the schema that came with a wire type its declared type cannot take: the message
     * is SCHEMA_MISMATCH (a producer changed the field's type), not corrupt, and no value of it is
     * read. Protobuf's own compatible changes keep the wire type (int32/int64/uint/bool/enum,
     * sint32/sint64, fixed32/sfixed32, string/bytes/message, singular/repeated), so they never
     * come here, and a repeated scalar sent packed or unpacked is read either way ({@link
     * MessagePlan#parse}). protobuf-java would skip such a field as unknown, which left it at its
     * default (or null) in silence.
     */
    static final class WrongWireType extends RuntimeException {
        private final String path;
        private final String detail;

        WrongWireType(String path, String detail) {
            super(path + ": " + detail, null, false, false); // no stack trace: thrown per bad row
            this.path = path;
            this.detail = detail;
        }

        /** The same mismatch, one field further out: "team.name: ...". */
        WrongWireType at(String field) {
            return new WrongWireType(field + "." + path, detail);
        }
    }

    /**
     * Set while {@link MessageDecoder} reads a message that had a wrong wire type again, to tell a
     * mismatch from a corrupt message (which names the record first: CORRUPT_PAYLOAD comes before
     * SCHEMA_MISMATCH): a wrong wire type is then skipped, as protobuf-java does. Read on the
     * mismatch path only, so a good message never looks at it.
     */
    static final ThreadLocal<boolean[]> SKIPPING_WRONG_WIRE_TYPES = ThreadLocal.withInitial(() -> new boolean[1]);

    private static final String[] WIRE_TYPE_NAMES = {"varint", "64-bit", "length-delimited", "start-group",
        "end-group", "32-bit"};

    static String wireTypeName(int wireType) {
        return wireType + " (" + (wireType < WIRE_TYPE_NAMES.length ? WIRE_TYPE_NAMES[wireType] : "invalid") + ")";
    }

    /**
     * A tag of a known field ({@code field}, declared as {@code declared}, whose wire type is
     * {@code expected}) with another wire type: a {@link WrongWireType}, or skipped while a
     * message is read again. An end-group tag or an invalid wire type is a corrupt message
     * either way ({@link #skip} refuses it).
     */
    static void wrongWireType(CodedInputStream in, int tag, String field, String declared, int expected)
            throws IOException {
        int wireType = WireFormat.getTagWireType(tag);
        boolean valid = wireType <= WireFormat.WIRETYPE_FIXED32 && wireType != WireFormat.WIRETYPE_END_GROUP;
        if (!valid || SKIPPING_WRONG_WIRE_TYPES.get()[0]) {
            skip(in, tag);
            return;
        }
        throw new WrongWireType(field, "wire type " + wireTypeName(wireType) + " where its declared type "
                + declared + " takes wire type " + wireTypeName(expected));
    }

    abstract static class FieldReader {
        final DataType type;
        final int wireType;
        /** Whether {@link #finish} does anything; scalars skip the call. */
        final boolean finishes;

        FieldReader(DataType type, int wireType, boolean finishes) {
            this.type = type;
            this.wireType = wireType;
            this.finishes = finishes;
        }

        /**
         * Reads one occurrence (tag already read, wire type checked). {@code current} is what the
         * field holds so far, for the occurrences that merge (messages); null if nothing.
         */
        abstract Object read(CodedInputStream in, Object current) throws IOException;

        /** The value as Spark holds it, from what {@link #read} built. */
        Object finish(Object partial) {
            return partial;
        }

        /** The value of a field that is not there and has no presence (proto3 scalars, map entries). */
        abstract Object defaultValue();

        boolean packable() {
            return false;
        }
    }

    static FieldReader scalar(FieldDescriptor field) {
        switch (field.getType()) {
            case INT32: return new Scalar(Scalar.INT32, DataTypes.IntegerType, field);
            case SINT32: return new Scalar(Scalar.SINT32, DataTypes.IntegerType, field);
            case SFIXED32: return new Scalar(Scalar.SFIXED32, DataTypes.IntegerType, field);
            case UINT32: return new Scalar(Scalar.UINT32, DataTypes.LongType, field);
            case FIXED32: return new Scalar(Scalar.FIXED32, DataTypes.LongType, field);
            // Unsigned 64-bit values above 2^63-1 read negative: Spark has no unsigned long.
            case INT64: return new Scalar(Scalar.INT64, DataTypes.LongType, field);
            case UINT64: return new Scalar(Scalar.INT64, DataTypes.LongType, field);
            case SINT64: return new Scalar(Scalar.SINT64, DataTypes.LongType, field);
            case SFIXED64: return new Scalar(Scalar.FIXED64, DataTypes.LongType, field);
            case FIXED64: return new Scalar(Scalar.FIXED64, DataTypes.LongType, field);
            case FLOAT: return new Scalar(Scalar.FLOAT, DataTypes.FloatType, field);
            case DOUBLE: return new Scalar(Scalar.DOUBLE, DataTypes.DoubleType, field);
            case BOOL: return new Scalar(Scalar.BOOL, DataTypes.BooleanType, field);
            // As DynamicMessage: invalid UTF-8 is an error where the schema asks for a check (proto3).
            case STRING: return new Scalar(field.needsUtf8Check() ? Scalar.STRING_STRICT : Scalar.STRING_LOOSE,
                    DataTypes.StringType, field);
            case BYTES: return new Scalar(Scalar.BYTES, DataTypes.BinaryType, field);
            case ENUM: return new EnumReader(field);
            default: throw new IllegalArgumentException("not a scalar: " + field.getFullName());
        }
    }

    static final class Scalar extends FieldReader {
        static final int INT32 = 0, SINT32 = 1, SFIXED32 = 2, UINT32 = 3, FIXED32 = 4, INT64 = 5, SINT64 = 6,
                FIXED64 = 7, FLOAT = 8, DOUBLE = 9, BOOL = 10, STRING_STRICT = 11, STRING_LOOSE = 12, BYTES = 13;

        private final int kind;
        private final Object defaultValue;

        Scalar(int kind, DataType type, FieldDescriptor field) {
            super(type, field.getLiteType().getWireType(), false);
            this.kind = kind;
            // A repeated field's default is an empty list; its elements never need one.
            Object value = field.isRepeated() ? null : field.getDefaultValue();
            if (value == null) {
                // nothing to convert
            } else if (kind == UINT32 || kind == FIXED32) {
                value = Integer.toUnsignedLong((Integer) value);
            } else if (kind == BYTES) {
                value = ((ByteString) value).toByteArray();
            } else if (kind == STRING_STRICT || kind == STRING_LOOSE) {
                value = UTF8String.fromString((String) value);
            }
            this.defaultValue = value;
        }

        @Override
        Object read(CodedInputStream in, Object current) throws IOException {
            switch (kind) {
                case INT32: return in.readInt32();
                case SINT32: return in.readSInt32();
                case SFIXED32: return in.readSFixed32();
                case UINT32: return Integer.toUnsignedLong(in.readUInt32());
                case FIXED32: return Integer.toUnsignedLong(in.readFixed32());
                case INT64: return in.readInt64();
                case SINT64: return in.readSInt64();
                case FIXED64: return in.readFixed64();
                case FLOAT: return in.readFloat();
                case DOUBLE: return in.readDouble();
                case BOOL: return in.readBool();
                case STRING_STRICT: return text(in.readByteArray(), true);
                case STRING_LOOSE: return text(in.readByteArray(), false);
                case BYTES: return in.readByteArray();
                default: throw new IllegalStateException("scalar kind " + kind);
            }
        }

        @Override
        Object defaultValue() {
            return defaultValue;
        }

        @Override
        boolean packable() {
            return wireType != WireFormat.WIRETYPE_LENGTH_DELIMITED;
        }

        /**
         * UTF-8 bytes as Spark's text, with protobuf-java's semantics: {@code strict}
         * (readStringRequireUtf8) refuses invalid UTF-8; otherwise (readString) each invalid
         * sequence becomes U+FFFD, as Java's decoder replaces it. ASCII, the common case, is
         * taken as it is; other text is checked by decoding it the way protobuf-java does.
         */
        private static UTF8String text(byte[] bytes, boolean strict) throws InvalidProtocolBufferException {
            for (byte b : bytes) {
                if (b < 0) {
                    String decoded = new String(bytes, StandardCharsets.UTF_8);
                    byte[] encoded = decoded.getBytes(StandardCharsets.UTF_8);
                    if (Arrays.equals(encoded, bytes)) {
                        return UTF8String.fromBytes(bytes); // valid: nothing was replaced
                    }
                    if (strict) {
                        throw new InvalidProtocolBufferException("Protocol message had invalid UTF-8.");
                    }
                    return UTF8String.fromBytes(encoded);
                }
            }
            return UTF8String.fromBytes(bytes);
        }
    }

    /** An enum as its value's name; a number the schema does not name, as that number in text. */
    static final class EnumReader extends FieldReader {
        private final UTF8String[] dense; // by number - offset, when the numbers are close together
        private final int offset;
        private final Map<Integer, UTF8String> sparse;
        private final boolean closed;
        private final UTF8String defaultName;

        EnumReader(FieldDescriptor field) {
            super(DataTypes.StringType, WireFormat.WIRETYPE_VARINT, false);
            EnumDescriptor type = field.getEnumType();
            int min = Integer.MAX_VALUE, max = Integer.MIN_VALUE;
            for (EnumValueDescriptor value : type.getValues()) {
                min = Math.min(min, value.getNumber());
                max = Math.max(max, value.getNumber());
            }
            if ((long) max - min < 1024) {
                dense = new UTF8String[max - min + 1];
                offset = min;
                sparse = null;
            } else {
                dense = null;
                offset = 0;
                sparse = new HashMap<>();
            }
            for (EnumValueDescriptor value : type.getValues()) {
                if (type.findValueByNumber(value.getNumber()) == value) { // the first of aliases
                    UTF8String name = UTF8String.fromString(value.getName());
                    if (dense != null) {
                        dense[value.getNumber() - min] = name;
                    } else {
                        sparse.put(value.getNumber(), name);
                    }
                }
            }
            // As DynamicMessage: an unknown number of a closed enum leaves the field unset.
            closed = field.legacyEnumFieldTreatedAsClosed();
            defaultName = field.isRepeated() ? null
                    : UTF8String.fromString(((EnumValueDescriptor) field.getDefaultValue()).getName());
        }

        @Override
        Object read(CodedInputStream in, Object current) throws IOException {
            int number = in.readEnum();
            UTF8String name;
            if (dense != null) {
                int at = number - offset;
                name = at >= 0 && at < dense.length ? dense[at] : null;
            } else {
                name = sparse.get(number);
            }
            if (name != null) {
                return name;
            }
            return closed ? SKIP : UTF8String.fromString(Integer.toString(number));
        }

        @Override
        Object defaultValue() {
            return defaultName;
        }

        @Override
        boolean packable() {
            return true;
        }
    }

    /** A nested message as a struct; a second occurrence merges into the first, as Protobuf specifies. */
    static final class MessageReader extends FieldReader {
        private final MessagePlan plan;
        private final int endGroupTag; // 0 unless a proto2 group

        MessageReader(MessagePlan plan, FieldDescriptor field) {
            super(plan.type, field.getType() == FieldDescriptor.Type.GROUP
                    ? WireFormat.WIRETYPE_START_GROUP : WireFormat.WIRETYPE_LENGTH_DELIMITED, true);
            this.plan = plan;
            this.endGroupTag = wireType == WireFormat.WIRETYPE_START_GROUP
                    ? tag(field.getNumber(), WireFormat.WIRETYPE_END_GROUP) : 0;
        }

        @Override
        Object read(CodedInputStream in, Object current) throws IOException {
            Object[] values = current != null ? (Object[]) current : plan.newValues();
            if (endGroupTag != 0) {
                plan.parse(in, values, endGroupTag);
            } else {
                int limit = in.pushLimit(in.readRawVarint32());
                plan.parse(in, values, 0);
                in.popLimit(limit);
            }
            return values;
        }

        @Override
        Object finish(Object partial) {
            return plan.finish((Object[]) partial);
        }

        @Override
        Object defaultValue() {
            return plan.finish(plan.newValues(), false);
        }
    }

    /** google.protobuf.Timestamp as a Spark timestamp: microseconds since the epoch (finer digits are dropped). */
    static final class TimestampReader extends FieldReader {
        private static final int SECONDS_TAG = tag(1, WireFormat.WIRETYPE_VARINT);
        private static final int NANOS_TAG = tag(2, WireFormat.WIRETYPE_VARINT);

        TimestampReader() {
            super(DataTypes.TimestampType, WireFormat.WIRETYPE_LENGTH_DELIMITED, true);
        }

        @Override
        Object read(CodedInputStream in, Object current) throws IOException {
            long[] secondsAndNanos = current != null ? (long[]) current : new long[2];
            int limit = in.pushLimit(in.readRawVarint32());
            for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
                if (tag == SECONDS_TAG) {
                    secondsAndNanos[0] = in.readInt64();
                } else if (tag == NANOS_TAG) {
                    secondsAndNanos[1] = in.readInt32();
                } else if (tag >>> 3 == 1) {
                    wrongWireType(in, tag, "seconds", "int64", WireFormat.WIRETYPE_VARINT);
                } else if (tag >>> 3 == 2) {
                    wrongWireType(in, tag, "nanos", "int32", WireFormat.WIRETYPE_VARINT);
                } else {
                    skip(in, tag);
                }
            }
            in.popLimit(limit);
            return secondsAndNanos;
        }

        @Override
        Object finish(Object partial) {
            long[] secondsAndNanos = (long[]) partial;
            long seconds = secondsAndNanos[0];
            long nanos = secondsAndNanos[1];
            if (seconds < MIN_SECONDS || seconds > MAX_SECONDS || nanos < 0 || nanos > 999_999_999) {
                throw new BadValue(": timestamp out of range (seconds=" + seconds + ", nanos=" + nanos + ")");
            }
            // As Spark converts an Instant (DateTimeUtils.instantToMicros): no calendar rebasing,
            // and nanos are never negative, so the division truncates toward the earlier instant.
            return seconds * 1_000_000L + nanos / 1_000L;
        }

        @Override
        Object defaultValue() {
            return 0L;
        }
    }

    /** google.protobuf.*Value: the wrapped value as a plain column. */
    static final class WrapperReader extends FieldReader {
        private final FieldReader inner;
        private final int valueTag;
        private final String valueType;

        WrapperReader(Descriptor wrapper) {
            this(scalar(wrapper.findFieldByNumber(1)), typeName(wrapper.findFieldByNumber(1)));
        }

        private WrapperReader(FieldReader inner, String valueType) {
            super(inner.type, WireFormat.WIRETYPE_LENGTH_DELIMITED, false);
            this.inner = inner;
            this.valueTag = tag(1, inner.wireType);
            this.valueType = valueType;
        }

        @Override
        Object read(CodedInputStream in, Object current) throws IOException {
            Object value = current;
            int limit = in.pushLimit(in.readRawVarint32());
            for (int tag = in.readTag(); tag != 0; tag = in.readTag()) {
                if (tag == valueTag) {
                    value = inner.read(in, null);
                } else if (tag >>> 3 == 1) {
                    wrongWireType(in, tag, "value", valueType, inner.wireType);
                } else {
                    skip(in, tag);
                }
            }
            in.popLimit(limit);
            return value != null ? value : inner.defaultValue(); // present, even if empty
        }

        @Override
        Object defaultValue() {
            return inner.defaultValue();
        }
    }

    /** A field's declared type as a .proto names it: {@code int64}, {@code string}, {@code lakehouse.demo.Team}. */
    static String typeName(FieldDescriptor field) {
        FieldDescriptor.Type type = field.getType();
        if (type == FieldDescriptor.Type.MESSAGE || type == FieldDescriptor.Type.GROUP) {
            return (type == FieldDescriptor.Type.GROUP ? "group " : "") + field.getMessageType().getFullName();
        }
        if (type == FieldDescriptor.Type.ENUM) {
            return "enum " + field.getEnumType().getFullName();
        }
        return type.name().toLowerCase(Locale.ROOT);
    }

    static int tag(int number, int wireType) {
        return number << 3 | wireType;
    }

    /** Skips a field the schema does not know (or that came with the wrong wire type), as DynamicMessage does. */
    static void skip(CodedInputStream in, int tag) throws IOException {
        if (!in.skipField(tag)) {
            throw new InvalidProtocolBufferException("end-group tag with no group open (field "
                    + WireFormat.getTagFieldNumber(tag) + ")");
        }
    }
}
