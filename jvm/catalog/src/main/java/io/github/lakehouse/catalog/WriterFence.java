package io.github.lakehouse.catalog;

import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.encryption.EncryptionManager;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A table's operations whose commit is the single-writer fence (ARCHITECTURE §8, "One writer per
 * stream").
 *
 * <p>An ingestion job writes each batch's snapshot with the id of the writer lease it holds in
 * the snapshot's summary ({@value #SNAPSHOT_HOLDER}; ingestion/bronze.py). Such a snapshot commits
 * only over a base whose lease property ({@value #LEASE_PROPERTY}, ingestion/single_writer.py)
 * names that same holder: a job that stalled past its lease while another took the stream over
 * cannot land the batch the other one replays. The check is made in {@code commit(base,
 * metadata)}, whose compare-and-swap of the metadata (the JDBC catalog's, by metadata location)
 * makes it atomic: a lease taken over between the check and the swap moved the metadata on, the
 * swap fails, and Iceberg's retry refreshes the base and comes back here, where the check reads the
 * new lease. A refusal is a {@link ValidationException}, which Iceberg's commit does not retry (it
 * retries only {@code CommitFailedException}) and a REST catalog server answers with 400, which
 * its client does not retry either.
 *
 * <p>Snapshots without the summary entry (dbt, maintenance, a dead-letter replay, the lease's own
 * property changes) are never fenced.
 */
final class WriterFence implements TableOperations {
  static final String LEASE_PROPERTY = "lakehouse.writer-lease";
  static final String SNAPSHOT_HOLDER = "lakehouse.writer-lease-holder";
  /** The words that name a refusal in the job's error line (ingestion/single_writer.py). */
  static final String REFUSED = "commit refused by the writer lease";

  /** Tests only: stop this JVM and its parent (the Python driver) with SIGSTOP at the first fenced commit. */
  static final String FAULT_POINT_PROPERTY = "lakehouse.fault-point";
  static final String STOP_INSIDE_COMMIT = "stop-inside-append-commit";

  private static final Logger LOG = LoggerFactory.getLogger(WriterFence.class);
  // The lease is a JSON object the job writes (json.dumps of ingestion/single_writer.py's Lease);
  // its holder is a hex id. Iceberg's own JSON library is shaded differently in the Spark runtime
  // and in iceberg-core, so the one field is read with a pattern.
  private static final Pattern HOLDER = Pattern.compile("\"holder\"\\s*:\\s*\"([^\"\\\\]*)\"");
  private static final AtomicBoolean STOPPED = new AtomicBoolean(false);

  private final TableOperations delegate;
  private final String table;

  WriterFence(TableOperations delegate, String table) {
    this.delegate = delegate;
    this.table = table;
  }

  @Override
  public void commit(TableMetadata base, TableMetadata metadata) {
    String writer = newSnapshotHolder(base, metadata);
    if (writer != null) {
      stopIfAsked();
      String holder = base == null ? null : leaseHolder(base.properties().get(LEASE_PROPERTY));
      if (!writer.equals(holder)) {
        throw new ValidationException(
            "%s: %s: the snapshot is written under lease %s, the table's lease is %s",
            table,
            REFUSED,
            writer,
            holder == null ? "held by no job" : "held by " + holder);
      }
    }
    delegate.commit(base, metadata);
  }

  /** The lease holder named by a snapshot the commit adds, or null when it adds none that names one. */
  static String newSnapshotHolder(TableMetadata base, TableMetadata metadata) {
    Set<Long> known = new HashSet<>();
    if (base != null) {
      for (Snapshot snapshot : base.snapshots()) {
        known.add(snapshot.snapshotId());
      }
    }
    for (Snapshot snapshot : metadata.snapshots()) {
      if (!known.contains(snapshot.snapshotId()) && snapshot.summary() != null) {
        String holder = snapshot.summary().get(SNAPSHOT_HOLDER);
        if (holder != null) {
          return holder;
        }
      }
    }
    return null;
  }

  /** The holder id of a lease property's value; null for none, or one without a holder. */
  static String leaseHolder(String lease) {
    if (lease == null) {
      return null;
    }
    Matcher matcher = HOLDER.matcher(lease);
    return matcher.find() ? matcher.group(1) : null;
  }

  private void stopIfAsked() {
    if (!STOP_INSIDE_COMMIT.equals(System.getProperty(FAULT_POINT_PROPERTY))
        || !STOPPED.compareAndSet(false, true)) {
      return;
    }
    ProcessHandle me = ProcessHandle.current();
    String pids = me.pid() + me.parent().map(parent -> " " + parent.pid()).orElse("");
    LOG.warn("{}: fault point {}: stopping this process and its parent ({}) with SIGSTOP (tests only)",
        table, STOP_INSIDE_COMMIT, pids);
    try {
      new ProcessBuilder(("kill -STOP " + pids).split(" ")).inheritIO().start().waitFor();
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public TableMetadata current() {
    return delegate.current();
  }

  @Override
  public TableMetadata refresh() {
    return delegate.refresh();
  }

  @Override
  public FileIO io() {
    return delegate.io();
  }

  @Override
  public EncryptionManager encryption() {
    return delegate.encryption();
  }

  @Override
  public String metadataFileLocation(String fileName) {
    return delegate.metadataFileLocation(fileName);
  }

  @Override
  public LocationProvider locationProvider() {
    return delegate.locationProvider();
  }

  @Override
  public TableOperations temp(TableMetadata uncommittedMetadata) {
    return delegate.temp(uncommittedMetadata);
  }

  @Override
  public long newSnapshotId() {
    return delegate.newSnapshotId();
  }

  @Override
  public boolean requireStrictCleanup() {
    return delegate.requireStrictCleanup();
  }
}
