"""Checks that must fail fast, before any install or start-up: Java and a free port.

Standard library only: `make demo` runs this with the system Python before creating the
virtual environment, so a missing Java or a taken port is reported in seconds, in one line.

    python3 lakehouse/core/preflight.py java            # exit 1 with one line if Java 17+ is missing
    python3 lakehouse/core/preflight.py port 9092 [PIDFILE]  # exit 1 if the port is taken
                                                      # (unless PIDFILE names a live process:
                                                      # the project's own broker, reused)
    python3 lakehouse/core/preflight.py mvn             # exit 1 if Maven is missing
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys

MIN_JAVA = 17


class PreflightError(Exception):
    pass


def java_executable() -> str:
    """The java binary: $JAVA_HOME/bin/java when JAVA_HOME is set, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = os.path.join(java_home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
        raise PreflightError(f"JAVA_HOME={java_home} has no bin/java: point it at a JDK {MIN_JAVA}+ or unset it")
    found = shutil.which("java")
    if not found:
        raise PreflightError(
            f"Java not found: Kafka and Spark need Java {MIN_JAVA}+ "
            "(Debian/Ubuntu: apt-get install openjdk-17-jdk-headless), or set JAVA_HOME"
        )
    return found


def check_java() -> str:
    java = java_executable()
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PreflightError(f"cannot run {java}: {exc}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise PreflightError(f"cannot tell the Java version of {java}: {out.strip()[:200]}")
    major = int(match.group(1))
    if major == 1:  # "1.8.0_xxx" style
        major = int(match.group(2) or 0)
    if major < MIN_JAVA:
        raise PreflightError(f"Java {major} found at {java}; Kafka 4 and Spark 4 need Java {MIN_JAVA}+")
    return java


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def check_port(port: int, what: str = "Kafka") -> None:
    if not port_is_free(port):
        raise PreflightError(
            f"port {port} is already in use: stop what listens there, or choose another "
            f"port for {what} with LAKEHOUSE_KAFKA_PORT=<port>"
        )


def own_process_alive(pidfile: str) -> bool:
    try:
        pid = int(open(pidfile).read().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def check_mvn() -> None:
    if not shutil.which("mvn"):
        raise PreflightError(
            "Maven (mvn) not found: it fetches the Kafka, Iceberg and connector jars from Maven Central "
            "(Debian/Ubuntu: apt-get install maven)"
        )


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["java"]:
            check_java()
        elif argv[:1] == ["mvn"]:
            check_mvn()
        elif argv[:1] == ["port"] and len(argv) in (2, 3):
            if not (len(argv) == 3 and own_process_alive(argv[2])):
                check_port(int(argv[1]))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except PreflightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
