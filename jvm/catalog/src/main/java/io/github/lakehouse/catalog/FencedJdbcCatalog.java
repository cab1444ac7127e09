package io.github.lakehouse.catalog;

import org.apache.iceberg.TableOperations;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.jdbc.JdbcCatalog;

/**
 * Iceberg's JDBC catalog, every table's commits behind the single-writer fence ({@link WriterFence},
 * ARCHITECTURE §8 "One writer per stream"). Everything else is JdbcCatalog's own: the same
 * database, the same properties ({@code uri}, {@code jdbc.*}, {@code warehouse}).
 *
 * <p>Loaded by name as a catalog implementation ({@code catalog-impl}): by Spark's SparkCatalog
 * (lakehouse/core/spark.py) and by a REST catalog server that serves a JDBC catalog (the tests'
 * RESTCatalogServer, whose commits then run here, on the server).
 */
public class FencedJdbcCatalog extends JdbcCatalog {

  @Override
  protected TableOperations newTableOps(TableIdentifier identifier) {
    return new WriterFence(super.newTableOps(identifier), identifier.toString());
  }
}
