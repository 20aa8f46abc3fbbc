"""Checks on a rendered overlay that schemas cannot express (deploy/check.sh).

usage: check_rendered.py <rendered.yaml> <out dir> [<rendered base.yaml>]

- Only the Prometheus Operator kinds may lack a Kubernetes schema; they get
  structural checks here, and the PrometheusRule's spec is written out for
  `promtool check rules`.
- The ConfigMap's tollgate.toml is written out for `tollgate check-config`.
- terminationGracePeriodSeconds exceeds preStop + the shutdown grace
  (server.shutdown_grace_ms, or unset the gateway's own rule:
  Config::shutdown_grace_ms).
- A Deployment (overlays/stateless) has the StatefulSet's pod template,
  except for the journal's volume.
"""

import sys
import tomllib
from pathlib import Path

import yaml

CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def fail(message):
    sys.exit(f"check_rendered: {message}")


# The gateway's defaults (src/config/): a provider's timeout_ms, the
# request's deadline, and the settle after a call.
PROVIDER_TIMEOUT_MS, REQUEST_TIMEOUT_MS, SETTLE_AFTER_CALL_MS = 60_000, 120_000, 5_000


def shutdown_grace_ms(config):
    server = config.get("server", {})
    if "shutdown_grace_ms" in server:
        return server["shutdown_grace_ms"]
    request = server.get("request_timeout_ms", REQUEST_TIMEOUT_MS)
    timeouts = [
        p.get("timeout_ms", PROVIDER_TIMEOUT_MS) for p in config.get("providers", {}).values()
    ]
    return min(max(timeouts, default=request), request) + SETTLE_AFTER_CALL_MS


def pod_spec_checks(workload, config_text):
    spec = workload["spec"]["template"]["spec"]
    container = spec["containers"][0]
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    pause = int(pre_stop[1]) if pre_stop[0] == "sleep" else 0
    needed = pause + shutdown_grace_ms(tomllib.loads(config_text)) / 1000
    if spec["terminationGracePeriodSeconds"] <= needed:
        fail(
            f"terminationGracePeriodSeconds {spec['terminationGracePeriodSeconds']} "
            f"must exceed preStop {pause} s + shutdown_grace_ms ({needed} s in all)"
        )
    probes = {
        "readinessProbe": "/readyz",
        "livenessProbe": "/healthz",
    }
    for probe, path in probes.items():
        if container[probe]["httpGet"]["path"] != path:
            fail(f"{probe} must ask {path}")
    security = container["securityContext"]
    if security.get("allowPrivilegeEscalation") is not False or not security.get(
        "readOnlyRootFilesystem"
    ):
        fail("the container's securityContext must forbid escalation and writes to /")
    if not spec["securityContext"].get("runAsNonRoot"):
        fail("the pod must run as non-root")


def template_without_data(workload):
    template = yaml.safe_load(yaml.safe_dump(workload["spec"]["template"]))
    volumes = template["spec"].get("volumes", [])
    template["spec"]["volumes"] = [v for v in volumes if v["name"] != "data"]
    return template


def main():
    rendered, out = Path(sys.argv[1]), Path(sys.argv[2])
    docs = [d for d in yaml.safe_load_all(rendered.read_text()) if d]
    by_kind = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)

    configs = [
        c for c in by_kind.get("ConfigMap", []) if "tollgate.toml" in c.get("data", {})
    ]
    if len(configs) != 1:
        fail(f"expected one ConfigMap with tollgate.toml, found {len(configs)}")
    config_text = configs[0]["data"]["tollgate.toml"]
    (out / "tollgate.toml").write_text(config_text)

    workloads = by_kind.get("StatefulSet", []) + by_kind.get("Deployment", [])
    if len(workloads) != 1:
        fail(f"expected one gateway workload, found {len(workloads)}")
    pod_spec_checks(workloads[0], config_text)
    if workloads[0]["kind"] == "Deployment":
        if len(sys.argv) < 4:
            fail("a Deployment needs the rendered base to compare with")
        base = [d for d in yaml.safe_load_all(Path(sys.argv[3]).read_text()) if d]
        stateful = [d for d in base if d["kind"] == "StatefulSet"][0]
        if template_without_data(workloads[0]) != template_without_data(stateful):
            fail("overlays/stateless/deployment.yaml drifted from base/statefulset.yaml")

    for monitor in by_kind.get("ServiceMonitor", []):
        selector = monitor["spec"]["selector"]["matchLabels"]
        services = [
            s
            for s in by_kind.get("Service", [])
            if selector.items() <= s["metadata"].get("labels", {}).items()
        ]
        ports = {p["name"] for s in services for p in s["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            if endpoint["port"] not in ports:
                fail(f"ServiceMonitor port {endpoint['port']} is on no selected Service")
    for index, rule in enumerate(by_kind.get("PrometheusRule", [])):
        if not rule["spec"].get("groups"):
            fail("PrometheusRule has no groups")
        (out / f"prometheusrule-{index}.yaml").write_text(yaml.safe_dump(rule["spec"]))
    print(
        "check_rendered: ok ("
        + ", ".join(f"{len(v)} {k}" for k, v in sorted(by_kind.items()))
        + ")"
    )


if __name__ == "__main__":
    main()
