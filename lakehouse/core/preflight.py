"""Checks that must fail fast, before any install or start-up: Java and a free port.

Standard library only: `make demo` runs this with the system Python before creating the
virtual environment, so a missing Java or a taken port is reported in seconds, in one line.

    python3 lakehouse/core/preflight.py java            # exit 1 with one line if Java 17+ is missing
    python3 lakehouse/core/preflight.py port 9092 [PIDFILE]  # exit 1 if the port is taken
                                                      # (unless PIDFILE names a live process:
                                                      # the project's own broker, reused)
    python3 lakehouse/core/preflight.py mvn             # exit 1 if Maven is missing
    python3 lakehouse/core/preflight.py java-home 21    # print the home of a JDK 21+ (JAVA_HOME's,
                                                      # PATH's, or one in /usr/lib/jvm), or exit 1
"""

from __future__ import annotations

import glob
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


def java_major(java: str) -> int:
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
    return major


def check_java() -> str:
    java = java_executable()
    major = java_major(java)
    if major < MIN_JAVA:
        raise PreflightError(f"Java {major} found at {java}; Kafka 4 and Spark 4 need Java {MIN_JAVA}+")
    return java


def java_home(minimum: int, what: str = "Debezium Server") -> str:
    """The home of a JDK of at least ``minimum``: JAVA_HOME's, the one on PATH, else the newest
    in /usr/lib/jvm (where Debian and the Temurin packages put theirs). The project runs on 17;
    this is for what needs a newer one beside it."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(os.environ["JAVA_HOME"])
    on_path = shutil.which("java")
    if on_path:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(on_path))))
    candidates += sorted(glob.glob("/usr/lib/jvm/*"), reverse=True)
    best: tuple[int, str] | None = None
    for home in candidates:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            continue
        try:
            major = java_major(java)
        except PreflightError:
            continue
        if major >= minimum and (best is None or major > best[0]):
            best = (major, home)
    if best is None:
        raise PreflightError(f"{what} needs Java {minimum}+ and none was found (JAVA_HOME, PATH, /usr/lib/jvm): "
                             f"install a JDK {minimum}+ beside Java {MIN_JAVA} (Debian 13: openjdk-21-jdk-headless)")
    return best[1]


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
        pid = int(open(pidfile).read().split()[0])  # the broker's start token may follow it
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
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
        elif argv[:1] == ["java-home"] and len(argv) == 2:
            print(java_home(int(argv[1])))
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
