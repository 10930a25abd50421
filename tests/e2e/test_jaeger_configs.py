"""Every file of collector-config/ checked by the program it configures.

* The Collector built from ``otelcol-builder.yaml`` validates each pipeline
  file alone and the two merged, as docker-compose.yaml runs them (Tempo's
  included; Grafana Tempo itself, AGPL-licensed, is not run here).
* Jaeger validates ``jaeger-config.yaml`` (the ``jaeger`` fixture also runs it,
  with ``jaeger-ui.json`` as its UI configuration).
* The versions docker-compose.yaml pins are the tested ones, or the README
  says which were tested.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ._stack import CONFIG_DIR, JAEGER_ENV, OTELCOL_ENV, ROOT, Jaeger, executable

VALIDATE_TIMEOUT_S = 120.0

TESTED_JAEGER = "2.12"
"""Jaeger's release for the Go module v1.75.0 that ``make e2e`` builds."""
TESTED_COLLECTOR = "0.165"
"""The Collector core (v0.165.0) and contrib (v0.165.1) release of otelcol-builder.yaml."""


def _validate(variable: str, configs: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    argv = [str(executable(variable)), "validate"]
    argv += [f"--config={CONFIG_DIR / c}" for c in configs]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL", "JAEGER_"))}
    return subprocess.run(
        argv,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize(
    "configs", [["jaeger.yaml"], ["tempo.yaml"], ["jaeger.yaml", "tempo.yaml"]], ids="+".join
)
def test_the_built_collector_validates_each_pipeline(configs: list[str]) -> None:
    """``otelcol validate`` accepts the pipeline files, alone and merged."""
    done = _validate(OTELCOL_ENV, configs)
    assert done.returncode == 0, f"{configs}: {done.stdout}{done.stderr}"


def test_the_collector_rejects_a_broken_pipeline(tmp_path: Path) -> None:
    """The validation above can fail: a pipeline naming an unknown exporter is refused."""
    broken = (
        (CONFIG_DIR / "jaeger.yaml")
        .read_text()
        .replace("exporters: [otlp_grpc/jaeger]", "exporters: [no_such_exporter]")
    )
    path = tmp_path / "broken.yaml"
    path.write_text(broken)
    done = _validate(OTELCOL_ENV, [str(path)])
    assert done.returncode != 0
    assert "no_such_exporter" in done.stdout + done.stderr


def test_jaeger_validates_its_config(jaeger: Jaeger) -> None:
    """Jaeger's ``validate`` accepts jaeger-config.yaml (and the fixture runs it)."""
    done = _validate(JAEGER_ENV, ["jaeger-config.yaml"])
    assert done.returncode == 0, done.stdout + done.stderr
    jaeger.program.check_alive()


def test_compose_pins_are_the_tested_versions_or_the_readme_says_so() -> None:
    """Each program docker-compose.yaml pins runs the tested release, or the README names it."""
    compose = yaml.safe_load((CONFIG_DIR / "docker-compose.yaml").read_text())
    images = {name: service.get("image", "") for name, service in compose["services"].items()}
    readme = (CONFIG_DIR / "README.md").read_text()
    tested = {"collector": TESTED_COLLECTOR, "jaeger": TESTED_JAEGER}
    for service, version in tested.items():
        tag = images[service].rsplit(":", 1)[-1]
        if tag.startswith(version):
            continue
        assert tag in readme, f"{images[service]} not in collector-config/README.md"
        said = re.search(rf"tested[^:]{{0,120}}{re.escape(version)}", readme, re.I)
        assert said, f"collector-config/README.md does not say {service} {version} was tested"
    assert "tempo" in images["tempo"]
    assert re.search(r"Tempo[^.]*not run", readme, re.S), "README: say that Tempo is not run"


@pytest.mark.parametrize("go", [None, "go1.22.1"], ids=["no go", "old go"])
def test_the_build_fails_saying_how_to_get_go(go: str | None, tmp_path: Path) -> None:
    """Without Go 1.25 or later, the build (and so ``make e2e``) fails and says what to install."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sha256sum", "cut", "mkdir", "dirname", "env", "nice"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    if go is not None:
        fake = bin_dir / "go"
        fake.write_text(f"#!/bin/sh\necho {go}\n")
        fake.chmod(0o755)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-otel-programs.sh")],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode != 0
    assert "install Go 1.25 or later from https://go.dev/dl/" in done.stderr
    assert not (tmp_path / ".cache").exists(), "it started building anyway"
