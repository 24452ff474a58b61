"""The class hub's configuration (hub/jupyterhub_config.py) read as JupyterHub reads it, without
starting a hub, and the Kubernetes values (hub/z2jh-values.yaml) that must make the same choices."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import yaml

pytest.importorskip("jupyterhub")
from traitlets.config import Config

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {
    "LMLESSONS_HUB_DIR": "/srv/class",
    "LMLESSONS_HUB_PASSWORD": "a class password",
    "LMLESSONS_HUB_ADMIN_PASSWORD": "x" * 32,
}


def load(monkeypatch: pytest.MonkeyPatch, **settings: str) -> tuple[Config, dict]:
    """The config JupyterHub would get, and the config file's names (its functions)."""
    for name in [n for n in os.environ if n.startswith("LMLESSONS_HUB_")]:
        monkeypatch.delenv(name)
    for name, value in {**SETTINGS, **settings}.items():
        monkeypatch.setenv(name, value)
    c = Config()
    names = {"get_config": lambda: c, "__file__": str(ROOT / "hub" / "jupyterhub_config.py")}
    exec((ROOT / "hub" / "jupyterhub_config.py").read_text(), names)
    return c, names


def test_the_config_keeps_servers_and_proxy_across_a_hub_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c, _ = load(monkeypatch)
    assert c.JupyterHub.cleanup_servers is False
    assert c.ConfigurableHTTPProxy.should_start is False
    assert c.JupyterHub.ip == "127.0.0.1"
    assert c.Spawner.cmd == ["/srv/class/venv/bin/jupyterhub-singleuser"]


def test_the_settings_reach_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    c, _ = load(monkeypatch, LMLESSONS_HUB_MEM_LIMIT="3G", LMLESSONS_HUB_TEACHER="prof")
    assert c.Spawner.mem_limit == "3G" and c.Authenticator.admin_users == {"prof"}
    culler = next(s for s in c.JupyterHub.services if s["name"] == "idle-culler")
    assert "--timeout=3600" in culler["command"]
    assert not any(s["name"] == "lmlessons" for s in c.JupyterHub.services)  # no token, no service


def test_an_existing_account_outside_the_class_cannot_log_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, names = load(monkeypatch)
    assert names["course_account"]("root") is False
    assert names["course_account"]("no-such-account-here") is True  # the hub will make it


def test_the_kubernetes_values_make_the_same_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    c, names = load(monkeypatch)
    values = yaml.safe_load((ROOT / "hub" / "z2jh-values.yaml").read_text())
    user = values["singleuser"]
    assert user["memory"]["limit"] == c.Spawner.mem_limit
    assert user["defaultUrl"] == c.Spawner.default_url
    assert user["extraEnv"] == {k: v for k, v in c.Spawner.environment.items() if k != "PATH"}
    assert values["cull"]["timeout"] == names["IDLE_TIMEOUT_S"]
    assert values["hub"]["config"]["Authenticator"]["admin_users"] == sorted(
        c.Authenticator.admin_users
    )
    from lmlessons import __version__

    assert user["image"]["tag"] == __version__  # the image of this release
    copy = " ".join(user["lifecycleHooks"]["postStart"]["exec"]["command"])
    assert c.Spawner.default_url.split("/lab/tree/")[1].split("/")[0] in copy  # ~/lessons


def ignores_sigint(preexec_fn: object) -> bool:
    """Whether a child started while this process ignores SIGINT ignores it too."""
    import signal
    import subprocess

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        child = subprocess.Popen(["sleep", "5"], preexec_fn=preexec_fn)  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGINT, before)
    try:
        status = Path(f"/proc/{child.pid}/status").read_text()
        ignored = int(
            next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16
        )
        return bool(ignored & (1 << (signal.SIGINT - 1)))
    finally:
        child.kill()
        child.wait()


def test_the_hub_and_proxy_hear_sigint_even_when_started_where_it_is_ignored() -> None:
    from tools.hub import signals_by_default

    assert ignores_sigint(None)  # what a shell's background job passes on
    assert not ignores_sigint(signals_by_default)  # what the hub and the proxy get


def test_a_memory_cgroup_is_made_in_v1_or_v2_and_skipped_where_none_can_be(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, names = load(monkeypatch)
    v1, v2, other = tmp_path / "v1" / "memory", tmp_path / "v2", tmp_path / "cpu"
    for root in (v1, v2, other):
        root.mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory")
    for roots, limit_file in (((v1,), "memory.limit_in_bytes"), ((other, v2), "memory.max")):
        names["CGROUP_ROOTS"] = roots
        group = names["memory_cgroup"]("ada", 2 * 1024**3)
        assert group == roots[-1] / "lmlessons" / "ada"
        assert (group / limit_file).read_text() == str(2 * 1024**3)
    names["CGROUP_ROOTS"] = (other,)  # neither a v1 memory controller nor a v2 root
    assert names["memory_cgroup"]("ada", 2 * 1024**3) is None


def test_the_spawner_reads_the_limit_as_jupyterhub_parses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c, names = load(monkeypatch, LMLESSONS_HUB_MEM_LIMIT="1.5G")
    spawner = names["ClassSpawner"](config=c)
    assert spawner.mem_limit == int(1.5 * 1024**3)


def test_the_hubs_temp_folder_is_one_every_account_can_enter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where TMPDIR is a folder of root's own (a 0700 TMPDIR, systemd's PrivateTmp), the hub's
    folder goes where learners can reach its venv and student copies."""
    from tools.hub import shared_temp_dir

    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    for tmpdir, inside in ((closed, False), (None, True)):
        monkeypatch.setattr(tempfile, "tempdir", None if tmpdir is None else str(tmpdir))
        made = shared_temp_dir("lmlessons-test-")
        try:
            assert (closed in made.parents) is False and made.stat().st_mode & 0o777 == 0o755
            assert (made.parent == Path(tempfile.gettempdir()).resolve()) is inside
        finally:
            made.rmdir()
