package io.github.lakehouse.protobuf;

import java.io.Serializable;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.FalseLiteral$;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.DataType;
import scala.collection.immutable.IndexedSeq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The registered function as a Catalyst expression: {@code name(value binary)} returning
 * {@link MessageDecoder#resultType}.
 *
 * <p>Why an expression and not a UDF: Spark converts whatever a Java UDF returns (a Row of
 * Java values) into its internal row field by field, through CatalystTypeConverters; for the
 * employees stream that conversion was 6% of the job's CPU (benchmarks/RESULTS.md). An
 * expression returns the internal row itself, which {@link MessagePlan} builds directly.
 *
 * <p>Serialized to executors with the descriptor set as plain bytes; each deserialized copy
 * looks its decoder up once ({@link MessageDecoder#of} keeps one per JVM).
 */
// Expression, not UnaryExpression: javac cannot see that UnaryExpression's final
// withNewChildrenInternal (a Scala bridge) implements TreeNode's, so the class would not compile.
public final class DecodeExpression extends Expression implements Serializable {
    private static final long serialVersionUID = 1L;

    private final Expression child;
    private final String name;
    private final byte[] descriptorSet;
    private final String messageName;
    private transient volatile MessageDecoder decoder;

    /** Every field is a constructor argument, in this order: Spark copies expressions by reflection on them. */
    public DecodeExpression(Expression child, String name, byte[] descriptorSet, String messageName) {
        this.child = child;
        this.name = name;
        this.descriptorSet = descriptorSet;
        this.messageName = messageName;
    }

    MessageDecoder decoder() {
        MessageDecoder current = decoder;
        if (current == null) {
            current = decoder = MessageDecoder.of(descriptorSet, messageName);
        }
        return current;
    }

    /** Called by the generated code; {@code value} null for a record without a value. */
    public InternalRow decode(byte[] value) {
        return decoder().decode(value);
    }

    @Override
    public scala.collection.immutable.Seq<Expression> children() {
        return CollectionConverters.asScala(List.of(child)).toList();
    }

    @Override
    public DataType dataType() {
        return decoder().resultType();
    }

    @Override
    public boolean nullable() {
        return false; // a missing value is an error row, never null
    }

    @Override
    public Object eval(InternalRow input) {
        return decode((byte[]) child.eval(input));
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
        ExprCode value = child.genCode(ctx);
        String self = ctx.addReferenceObj("protobufDecode", this, DecodeExpression.class.getName());
        // <the child's code>
        // InternalRow <result> = <self>.decode(<child is null> ? null : <child>);
        List<String> parts = List.of("", "\nInternalRow ", " = " + self + ".decode(", " ? null : ", ");\n");
        List<JavaCode> inputs = List.of(value.code(), ev.value(), value.isNull(), value.value());
        return ev.copy(new CodeBlock(CollectionConverters.asScala(parts).toList(),
                CollectionConverters.asScala(inputs).toList()), FalseLiteral$.MODULE$, ev.value());
    }

    @Override
    public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
        return new DecodeExpression(newChildren.apply(0), name, descriptorSet, messageName);
    }

    @Override
    public String prettyName() {
        return name;
    }

    @Override
    public String toString() {
        return name + "(" + child + ")";
    }

    @Override
    public String sql() {
        return name + "(" + child.sql() + ")";
    }

    @Override
    public int productArity() {
        return 4;
    }

    @Override
    public Object productElement(int n) {
        switch (n) {
            case 0: return child;
            case 1: return name;
            case 2: return descriptorSet;
            case 3: return messageName;
            default: throw new IndexOutOfBoundsException(String.valueOf(n));
        }
    }

    @Override
    public boolean canEqual(Object other) {
        return other instanceof DecodeExpression;
    }

    @Override
    public boolean equals(Object other) {
        if (this == other) {
            return true;
        }
        if (!(other instanceof DecodeExpression)) {
            return false;
        }
        DecodeExpression that = (DecodeExpression) other;
        return child.equals(that.child) && name.equals(that.name) && messageName.equals(that.messageName)
                && Arrays.equals(descriptorSet, that.descriptorSet);
    }

    @Override
    public int hashCode() {
        return Objects.hash(child, name, messageName, Arrays.hashCode(descriptorSet));
    }
}
