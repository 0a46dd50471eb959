"""Kernel module builds and installs that failed (DKMS, a module's make, the .run
installer), and the driver losing its GPUs to another driver: read in their framings and
judged as the node's software or configuration, never the GPU."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import pytest
from hostkit import pci_tree, run

from gputriage.ingest.detect import detect, source_for_command
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.module_build import is_driver_module, parse_module_build
from gputriage.text.fields import ParseError

SOURCE_SAMPLES = {"module_build": ("corpus:zenkernel305-nvidia-dkms", "corpus:nvpeermem70",
                                   "corpus:olares3963-runfile")}

UBUNTU_DKMS_HEADERS = """\
Setting up nvidia-dkms-535 (535.183.01-0ubuntu1) ...
Building for 6.8.0-45-generic
Building initial module for 6.8.0-45-generic
Error! Your kernel headers for kernel 6.8.0-45-generic cannot be found at /lib/modules/6.8.0-45-generic/build or /lib/modules/6.8.0-45-generic/source.
"""
MAKE_LOG_COMPILE = """\
DKMS make.log for nvidia-470.256.02 for kernel 6.11.0-9-generic (x86_64)
/var/lib/dkms/nvidia/470.256.02/build/nvidia-drm/nvidia-drm-drv.c:632:5: error: implicit declaration of function 'drm_fbdev_generic_setup'
make[2]: *** [scripts/Makefile.build:244: /var/lib/dkms/nvidia/470.256.02/build/nvidia-drm/nvidia-drm-drv.o] Error 1
"""
GDRDRV_UNDEFINED = """\
make -C /lib/modules/5.15.0-1071-aws/build M=/opt/gdrcopy/src/gdrdrv modules
  MODPOST /opt/gdrcopy/src/gdrdrv/Module.symvers
ERROR: modpost: "nvidia_p2p_get_pages" [/opt/gdrcopy/src/gdrdrv/gdrdrv.ko] undefined!
make[2]: *** [scripts/Makefile.modpost:133: /opt/gdrcopy/src/gdrdrv/Module.symvers] Error 1
"""
INSTALLER_KEY = """\
ERROR: Unable to load the kernel module 'nvidia.ko'.  This happens most frequently when this kernel module was built against the wrong or improperly configured kernel sources
-> Kernel module load error: Required key not available
"""
OPERATOR_LOG = """\
Starting installation of NVIDIA driver version 550.90.07 for Linux kernel version 6.5.0-1024-aws
Compiling NVIDIA driver kernel modules...
/usr/src/nvidia-550.90.07/kernel/nvidia/nv.c:1022:5: error: implicit declaration of function 'x'
make[1]: *** [Makefile:1922: /usr/src/nvidia-550.90.07/kernel] Error 2
"""
NOVA = ("[   4.210514] NVRM: GPU 0000:41:00.0 is already bound to NovaCore.\n"
        "[   4.213648] NVRM: No NVIDIA devices probed.\n")

RULE_CASES = {
    "driver.module-build": [({"module_build": UBUNTU_DKMS_HEADERS}, "driver.module-build-failed"),
                            ({"module_build": INSTALLER_KEY}, "driver.install-failed")],
}


def _found(text: str) -> dict:
    return {f.id: f for f in run(**dict(detect(text))).findings}


def test_parse_dkms_headers_missing(corpus) -> None:
    build = parse_module_build(dict(detect(corpus.sample("zenkernel305").text()))["module_build"])
    assert (build.module, build.version) == ("nvidia", "525.89.02")
    assert build.kernels[0] == "6.2.6-zen1-1-zen" and "6.2.1-zen1-1-zen" in build.kernels
    assert build.kinds()[0] == "build-failed" and "headers-missing" in build.kinds()


# the driver's own module that did not build: a warning while nothing shows the node
# without a driver now (the next boot into that kernel has none), see below
@pytest.mark.parametrize(("text", "module", "kind", "severity"), [
    (UBUNTU_DKMS_HEADERS, "nvidia", "headers-missing", Severity.WARNING),
    (MAKE_LOG_COMPILE, "nvidia", "compile-error", Severity.WARNING),
    (GDRDRV_UNDEFINED, "gdrdrv", "undefined-symbol", Severity.WARNING),
])
def test_each_kind_of_build_failure(text: str, module: str | None, kind: str,
                                    severity: Severity) -> None:
    assert [name for name, _ in detect(text)] == ["module_build"]
    build = parse_module_build(text)
    assert build.module == module and kind in build.kinds()
    f = _found(text)["driver.module-build-failed"]
    assert (f.severity, f.action, f.blame) == (severity, Action.FIX_SOFTWARE, Blame.NODE)


def test_the_drivers_own_module_failing_on_the_running_kernel_is_critical() -> None:
    text = UBUNTU_DKMS_HEADERS.replace("Building for", "Building module nvidia/535.183.01 for") \
        .replace("Setting up", "dkms install nvidia/535.183.01 -k 6.8.0-45-generic\nSetting up")
    uname = "Linux gpu-7 6.8.0-45-generic #45-Ubuntu SMP x86_64 GNU/Linux\n"
    f = {f.id: f for f in run(module_build=text, uname=uname).findings}[
        "driver.module-build-failed"]
    assert f.severity is Severity.CRITICAL and "headers" in f.title
    other = uname.replace("6.8.0-45", "6.8.0-40")
    assert {f.id: f for f in run(module_build=text, uname=other).findings}[
        "driver.module-build-failed"].severity is Severity.WARNING
    assert "dkms autoinstall -k 6.8.0-45-generic" in f.step
    assert "nvidia/535.183.01 installed for 6.8.0-45-generic" in f.step


def test_the_drivers_own_module_failing_while_none_is_loaded_is_the_one_cause() -> None:
    """The driver's module did not build and no nvidia module is loaded: one critical
    finding, the build, with the module not loaded and nvidia-smi's complaint under it."""
    modules = "xt_conntrack 16384 1 - Live 0x0000000000000000\n"
    smi = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
           "sure that the latest NVIDIA driver is installed and running.\n")
    for build, cause in ((MAKE_LOG_COMPILE, "driver.module-build-failed"),
                         (INSTALLER_KEY, "driver.install-failed")):
        result = run(module_build=build, proc_modules=modules, nvidia_smi=smi,
                     pci_devices=pci_tree({"0000:41:00.0": ""}))
        [f] = [f for f in result.findings if f.severity is Severity.CRITICAL]
        assert f.id == cause
        assert sorted(c.id for c in f.consequences) == ["driver.not-loaded",
                                                        "nvidia-smi.cannot-communicate"]


def test_a_peer_memory_build_is_not_the_gpu_operator(corpus) -> None:
    text = corpus.sample("nvpeermem70").text()
    found = _found(text)
    assert "k8s.operator-driver-failed" not in found
    f = found["driver.module-build-failed"]
    assert f.severity is Severity.WARNING and "symbol versions" in f.title
    assert "nvidia-peermem" in f.step


def test_the_operators_driver_container_keeps_its_own_log() -> None:
    names = [name for name, _ in detect(OPERATOR_LOG)]
    assert names == ["gpu_operator_log"]


def test_installer_load_failures_say_why() -> None:
    f = _found(INSTALLER_KEY)["driver.install-failed"]
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.FIX_SOFTWARE,
                                               Blame.NODE)
    assert "Secure Boot" in f.explanation


def test_a_gpu_held_by_another_driver_explains_the_failed_install() -> None:
    text = ("ERROR: Unable to load the kernel module 'nvidia.ko'.\n"
            "-> Kernel module load error: No such device\n" + NOVA)
    assert sorted(name for name, _ in detect(text)) == ["kernel_log", "module_build"]
    result = run(**dict(detect(text)))
    [f] = result.findings
    assert f.id == "driver.no-adapter-probed" and "held by NovaCore" in f.title
    assert (f.action, f.blame, f.scope.pci_bus_id) == (Action.FIX_CONFIG, Blame.CONFIG,
                                                       "0000:41:00.0")
    assert [c.id for c in f.consequences] == ["driver.install-failed"]
    assert "nova_core, nova_drm and nova" in f.step and "lspci -k -s 0000:41:00.0" in f.step


@pytest.mark.parametrize("text", [
    "[ 5413.400038] NVRM: The NVIDIA probe routine was not called for 1 device(s).\n"
    "[ 5413.400040] NVRM: No NVIDIA devices probed.\n",
    "Mar 13 15:07:06 ape kernel: NVRM: No NVIDIA devices probed.\n",
    "[188497.595099] NVRM: No NVIDIA graphics adapter probed!\n",
])
def test_no_device_probed_wordings_are_one_finding(text: str) -> None:
    found = _found(text)
    assert list(found) == ["driver.no-adapter-probed"]
    assert "nouveau" in found["driver.no-adapter-probed"].step


def test_kernel_lines_are_left_to_the_kernel_log() -> None:
    text = ("Error! Bad return status for module build on kernel: 6.1.0 (x86_64)\n"
            "Mar 13 15:07:06 ape kernel: NVRM: No NVIDIA devices probed.\n")
    assert dict(detect(text))["module_build"].count("\n") == 1


def test_only_dkms_commands_that_build_name_a_module_build() -> None:
    """``dkms status`` lists modules, it builds none: its output is not read as a build
    (and then refused as one)."""
    for cmd in ("sudo dkms install -m nvidia -v 470.86", "dkms autoinstall",
                "dkms build nvidia/535.183.01 -k 6.8.0-45-generic"):
        assert source_for_command(cmd) == "module_build", cmd
    for cmd in ("dkms status", "sudo dkms remove nvidia/535.183.01 --all"):
        assert source_for_command(cmd) is None, cmd


def test_is_driver_module() -> None:
    assert all(map(is_driver_module, ("nvidia", "nvidia-open", "nvidia-current", "nvidia.ko")))
    assert not any(map(is_driver_module, ("nvidia-peer-memory", "nvidia-fs", "gdrdrv", None)))


def test_text_without_a_build_is_refused() -> None:
    with pytest.raises(ParseError):
        parse_module_build("make: *** [all] Error 2\n")
