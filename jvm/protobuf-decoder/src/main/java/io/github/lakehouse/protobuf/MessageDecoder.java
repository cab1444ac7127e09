package io.github.lakehouse.protobuf;

import com.google.protobuf.AnyProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DurationProto;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.EmptyProto;
import com.google.protobuf.FieldMaskProto;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.StructProto;
import com.google.protobuf.TimestampProto;
import com.google.protobuf.WrappersProto;
import io.github.lakehouse.protobuf.FieldReaders.WrongWireType;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/** One message type of one descriptor set: its Spark type and its bytes-to-row conversion. */
final class MessageDecoder {
    private static final int DETAIL_MAX = 200;
    private static final UTF8String CORRUPT_PAYLOAD = UTF8String.fromString(ProtobufDecoder.CORRUPT_PAYLOAD);
    private static final UTF8String SCHEMA_MISMATCH = UTF8String.fromString(ProtobufDecoder.SCHEMA_MISMATCH);
    private static final InternalRow NO_VALUE = new GenericInternalRow(
            new Object[] {null, CORRUPT_PAYLOAD, UTF8String.fromString("no value")});

    // Fallbacks for a set compiled without --include_imports.
    private static final Map<String, FileDescriptor> WELL_KNOWN = Map.of(
            "google/protobuf/timestamp.proto", TimestampProto.getDescriptor(),
            "google/protobuf/wrappers.proto", WrappersProto.getDescriptor(),
            "google/protobuf/duration.proto", DurationProto.getDescriptor(),
            "google/protobuf/any.proto", AnyProto.getDescriptor(),
            "google/protobuf/empty.proto", EmptyProto.getDescriptor(),
            "google/protobuf/struct.proto", StructProto.getDescriptor(),
            "google/protobuf/field_mask.proto", FieldMaskProto.getDescriptor());

    // Once per JVM per (descriptor set, message): every task deserializes its own UDF copy.
    private record Key(String messageName, ByteBuffer descriptorSet) {}

    private static final Map<Key, MessageDecoder> CACHE = new ConcurrentHashMap<>();

    private final MessagePlan payload;
    private final StructType resultType;

    private MessageDecoder(Descriptor descriptor) {
        this.payload = MessagePlan.of(descriptor);
        this.resultType = new StructType(new StructField[] {
            DataTypes.createStructField("payload", payload.type, true),
            DataTypes.createStructField("error_code", DataTypes.StringType, true),
            DataTypes.createStructField("error_detail", DataTypes.StringType, true),
        });
    }

    static MessageDecoder of(byte[] descriptorSet, String messageName) {
        if (descriptorSet == null || messageName == null) {
            throw new IllegalArgumentException("a descriptor set and a message name are required");
        }
        Key key = new Key(messageName, ByteBuffer.wrap(descriptorSet.clone()));
        return CACHE.computeIfAbsent(key, k -> new MessageDecoder(findMessage(descriptorSet, messageName)));
    }

    StructType resultType() {
        return resultType;
    }

    /**
     * The result row ({@link #resultType}). Never throws for bad input: a value that does not
     * decode gives an error row, CORRUPT_PAYLOAD; one whose bytes are a message but with a field
     * of the wrong wire type, SCHEMA_MISMATCH naming the field.
     */
    InternalRow decode(byte[] value) {
        if (value == null) {
            return NO_VALUE;
        }
        try {
            return new GenericInternalRow(new Object[] {read(value), null, null});
        } catch (WrongWireType e) {
            // Corrupt bytes name the record first: read it again skipping the wrong wire types
            // (what protobuf-java does); only the mismatch path pays for the second read.
            boolean[] skipping = FieldReaders.SKIPPING_WRONG_WIRE_TYPES.get();
            skipping[0] = true;
            try {
                read(value);
            } catch (IOException | RuntimeException corrupt) {
                return error(CORRUPT_PAYLOAD, corrupt);
            } finally {
                skipping[0] = false;
            }
            return error(SCHEMA_MISMATCH, e);
        } catch (IOException | RuntimeException e) {
            return error(CORRUPT_PAYLOAD, e);
        }
    }

    private InternalRow read(byte[] value) throws IOException {
        Object[] values = payload.newValues();
        payload.parse(CodedInputStream.newInstance(value), values, 0);
        return payload.finish(values);
    }

    private static InternalRow error(UTF8String code, Exception e) {
        return new GenericInternalRow(new Object[] {null, code, UTF8String.fromString(detail(e))});
    }

    private static String detail(Exception e) {
        String message = e.getMessage();
        if (message == null || message.isEmpty()) {
            message = e.getClass().getSimpleName();
        }
        return message.length() <= DETAIL_MAX ? message : message.substring(0, DETAIL_MAX);
    }

    static Descriptor findMessage(byte[] descriptorSet, String messageName) {
        FileDescriptorSet set;
        try {
            set = FileDescriptorSet.parseFrom(descriptorSet);
        } catch (InvalidProtocolBufferException e) {
            throw new IllegalArgumentException("not a Protobuf descriptor set: " + e.getMessage(), e);
        }
        Map<String, FileDescriptorProto> protos = new LinkedHashMap<>();
        for (FileDescriptorProto proto : set.getFileList()) {
            protos.putIfAbsent(proto.getName(), proto);
        }
        Map<String, FileDescriptor> built = new HashMap<>();
        Map<String, Descriptor> messages = new TreeMap<>();
        for (String name : protos.keySet()) {
            FileDescriptor file = build(name, null, protos, built, new HashSet<>());
            for (Descriptor message : file.getMessageTypes()) {
                collect(message, messages);
            }
        }
        String wanted = messageName.startsWith(".") ? messageName.substring(1) : messageName;
        Descriptor found = messages.get(wanted);
        if (found == null) {
            throw new IllegalArgumentException("message " + messageName + " is not in the descriptor set; it has: "
                    + String.join(", ", messages.keySet()));
        }
        return found;
    }

    private static void collect(Descriptor message, Map<String, Descriptor> into) {
        into.put(message.getFullName(), message);
        for (Descriptor nested : message.getNestedTypes()) {
            collect(nested, into);
        }
    }

    /** Builds a file after its imports (a set lists files in any order). */
    private static FileDescriptor build(String name, String importedBy, Map<String, FileDescriptorProto> protos,
                                        Map<String, FileDescriptor> built, Set<String> inProgress) {
        FileDescriptor done = built.get(name);
        if (done != null) {
            return done;
        }
        FileDescriptorProto proto = protos.get(name);
        if (proto == null) {
            FileDescriptor wellKnown = WELL_KNOWN.get(name);
            if (wellKnown != null) {
                return wellKnown;
            }
            throw new IllegalArgumentException("the descriptor set lacks " + name + ", imported by " + importedBy
                    + " (compile it with --include_imports)");
        }
        if (!inProgress.add(name)) {
            throw new IllegalArgumentException("import cycle through " + name + " in the descriptor set");
        }
        List<String> imports = proto.getDependencyList();
        FileDescriptor[] dependencies = new FileDescriptor[imports.size()];
        for (int i = 0; i < dependencies.length; i++) {
            dependencies[i] = build(imports.get(i), name, protos, built, inProgress);
        }
        FileDescriptor file;
        try {
            file = FileDescriptor.buildFrom(proto, dependencies);
        } catch (DescriptorValidationException e) {
            throw new IllegalArgumentException("invalid descriptor " + name + ": " + e.getMessage(), e);
        }
        inProgress.remove(name);
        built.put(name, file);
        return file;
    }
}
