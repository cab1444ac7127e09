"""An S3-compatible object store on this machine, for the tests of the cluster profile.

S3Proxy (jvm/s3-store) serves the S3 API over a local folder. The lakehouse reaches it
exactly as it reaches MinIO in docker-compose.yml: Iceberg's S3FileIO with an endpoint,
path-style access and keys from the AWS SDK's variables; pyiceberg through pyarrow's S3.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lakehouse.core.local_kafka import free_port
from tests.integration.processes import http_answers, running, wait_until

MAIN_CLASS = "org.gaul.s3proxy.Main"


@dataclass(frozen=True)
class S3Store:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def env(self) -> dict[str, str]:
        """The AWS SDK's variables, as compose gives them to the lakehouse services."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region}


@contextmanager
def s3_store(jars_dir: Path, folder: Path, buckets: list[str]) -> Iterator[S3Store]:
    jars = jars_dir / "s3-store"
    if not list(jars.glob("s3proxy-*.jar")):
        raise RuntimeError(f"S3Proxy's jars are missing in {jars}: run `make setup`")
    data = folder / "data"
    for bucket in buckets:  # the filesystem provider's buckets are its top-level folders
        (data / bucket).mkdir(parents=True, exist_ok=True)
    port = free_port()
    store = S3Store(f"http://127.0.0.1:{port}", "lakehouse", secrets.token_hex(16))
    properties = folder / "s3proxy.properties"
    properties.write_text("\n".join([
        f"s3proxy.endpoint={store.endpoint}",
        "s3proxy.authorization=aws-v2-or-v4",  # signed requests only: wrong keys are refused
        f"s3proxy.identity={store.access_key}",
        f"s3proxy.credential={store.secret_key}",
        "jclouds.provider=filesystem",
        f"jclouds.filesystem.basedir={data}",
    ]) + "\n")
    # Without a configuration logback logs every request at DEBUG: 100 MB and half the test's time.
    logging = folder / "logback.xml"
    logging.write_text('<configuration><appender name="out" class="ch.qos.logback.core.ConsoleAppender">'
                       '<encoder><pattern>%d %level %logger: %msg%n</pattern></encoder></appender>'
                       '<root level="WARN"><appender-ref ref="out"/></root></configuration>\n')
    log = folder / "s3proxy.log"
    command = ["java", "-Xmx256m", f"-Dlogback.configurationFile={logging}", "-cp", f"{jars}/*",
               MAIN_CLASS, "--properties", str(properties)]
    with running(command, dict(os.environ), log) as process:
        # An unsigned request gets 403: that is the server answering.
        wait_until(lambda: http_answers(store.endpoint), "S3Proxy", log, 60, process)
        yield store
