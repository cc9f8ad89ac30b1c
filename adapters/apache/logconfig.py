"""Our own logging config for a broker: where each release line looks for it, and the file we put there.

- 4.9.x: ``BrokerStartup`` configures logback from ``${rocketmq.home.dir}/conf/logback_broker.xml`` and exits
  with code 255 ("JoranException: Could not open [...]") when the file is missing.
- 5.0.0 logs as 4.9.x does (plain logback); its proxy (``ProxyStartup``) finds its home only in the environment
  (``RMQ_PROXY_HOME`` or ``ROCKETMQ_HOME``: the launcher sets the first) and exits without
  ``conf/logback_proxy.xml`` there.
- 5.1.0 and later: the broker logs through RocketMQ's shaded logback, which reads the file named by the system property
  ``rmq.logback.configurationFile``; without it, the first of ``rmq.logback-test.xml``, ``rmq.logback.xml``,
  ``rmq.proxy.logback.xml``, ``rmq.broker.logback.xml``, ... on the classpath (the broker jar's own config:
  rolling files under ``${user.home}/logs/rocketmqlogs``).

Both of ours write ``broker.log`` (and ``stats.log`` for the periodic statistics) into the directory given as
``-Drmqspec.log.dir``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .maven import RESOURCES
from .versions import ApacheVersion

LOG_DIR_PROPERTY = "rmqspec.log.dir"


def install(version: ApacheVersion, home: Path, log_dir: Path) -> list[str]:
    """Write the logging config of ``version`` under ``home``; the JVM flags that make the broker use it."""
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    flags = [f"-D{LOG_DIR_PROPERTY}={log_dir}"]
    if version.logging == "4.9":
        shutil.copyfile(RESOURCES / "logback-4.9.xml", conf / "logback_broker.xml")
        if version.proxy:  # 5.0.0's ProxyStartup: logback from ${RMQ_PROXY_HOME}/conf/logback_proxy.xml
            shutil.copyfile(RESOURCES / "logback-4.9.xml", conf / "logback_proxy.xml")
    else:
        target = conf / "rmq.broker.logback.xml"
        shutil.copyfile(RESOURCES / "logback-5.xml", target)
        flags.append(f"-Drmq.logback.configurationFile={target}")
    return flags
