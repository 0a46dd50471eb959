"""Redaction: identities taken out of a snapshot before it leaves the host.

``collect --redact`` replaces host names (the host's own, its FQDN, the name in
the manifest, the names it is part of such as ``node7-ib0``, and every name in
the host's DNS domain), the DNS domain itself, IPv4 and IPv6 addresses, MAC
addresses (``aa:bb:..``, ``aa-bb-..``, ``aabb.ccdd.eeff``) and InfiniBand GUIDs,
serial numbers, GPU and MIG UUIDs, and user names. Each distinct value maps to
one token for the whole snapshot (``host-1``, ``domain.invalid``, ``198.18.0.1``,
``2001:db8::1``, ``02:00:00:00:00:01``,
``GPU-00000000-0000-0000-0000-000000000001``, ``user-1``), in the value's own
shape, so parsers still read every source and the analysis finds the same GPUs
and the same findings. PCI bus ids are topology, not identity: they stay. The
manifest records that (and how many values of each kind) were replaced, never
the mapping.

Pure functions over text; :class:`Redactor` holds the mapping of one snapshot.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from gputriage.io import safejson

KINDS = ("hostname", "ip", "mac", "serial", "gpu-uuid", "user")

# names that identify nobody and that ordinary text is full of (a host called
# "ubuntu" must not rewrite /etc/os-release)
_GENERIC = frozenset({
    "", "(none)", "localhost", "localhost.localdomain", "root", "nobody", "daemon", "bin",
    "sys", "admin", "user", "linux", "kernel", "gpu", "nvidia", "ubuntu", "debian", "centos",
    "rocky", "rhel", "fedora", "almalinux", "sles", "none", "unknown", "node",
})
# serial-number values that are placeholders, not identities
_NO_SERIAL = frozenset({"", "n/a", "[n/a]", "not specified", "none", "unknown", "0",
                        "to be filled by o.e.m.", "default string", "not available",
                        "not applicable", "[not supported]", "not supported"})

_HEX = "[0-9A-Fa-f]"
_UUID_RE = re.compile(
    rf"\b(GPU|MIG)-({_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}})\b")
_XML_SERIAL_RE = re.compile(r"(<(\w*serial\w*)>)([^<]*)(</\2>)", re.IGNORECASE)
_SERIAL_KEY = r"\bserial(?:[ _-]?(?:number|no\.?))?"
_COLON_SERIAL_RE = re.compile(
    rf"({_SERIAL_KEY}[^\S\r\n]*:[^\S\r\n]*)(\S[^\r\n]*?)(?=[^\S\r\n]*$)",
    re.IGNORECASE | re.MULTILINE)
_EQUALS_SERIAL_RE = re.compile(rf"({_SERIAL_KEY}=\"?)([^\s\",;]+)", re.IGNORECASE)
# the kernel module's "GPU serial number is 1654923069943."
_IS_SERIAL_RE = re.compile(rf"({_SERIAL_KEY} is[ \t]+)([A-Za-z0-9][\w-]*)", re.IGNORECASE)
_DSN_RE = re.compile(rf"(Device Serial Number[ \t]+)({_HEX}{{2}}(?:-{_HEX}{{2}}){{7}})",
                     re.IGNORECASE)
_GUID_RE = re.compile(rf"(GUID[ \t]*[:=][ \t]*)(0x{_HEX}{{16}})\b", re.IGNORECASE)
_IPV6_RE = re.compile(
    rf"(?<![\w:.])(?:{_HEX}{{0,4}}:){{2,7}}(?:[0-9]{{1,3}}(?:\.[0-9]{{1,3}}){{3}}|{_HEX}{{0,4}})"
    r"(?![\w:])(?!\.[0-9])")
_MAC_RE = re.compile(rf"(?<![\w:])({_HEX}{{2}}(?::{_HEX}{{2}}){{5,19}})(?![\w:])")
# the same six bytes as Windows and some switches write them, and as Cisco does
_MAC_DASH_RE = re.compile(rf"(?<![\w-])({_HEX}{{2}}(?:-{_HEX}{{2}}){{5}})(?![\w-])")
_MAC_DOT_RE = re.compile(rf"(?<![\w.:-])({_HEX}{{4}}\.{_HEX}{{4}}\.{_HEX}{{4}})(?![\w-]|\.\w)")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4_RE = re.compile(rf"(?<![\w.])({_OCTET}(?:\.{_OCTET}){{3}})(?![\w]|\.[0-9])")
_USER_RES = (
    re.compile(r"/home/([A-Za-z_][\w.-]{0,31})"),
    re.compile(r"\b(?:USER|LOGNAME|SUDO_USER|user|uname)=\"?([A-Za-z_][\w.-]{0,31})"),
    re.compile(r"\bfor user ([A-Za-z_][\w.-]{0,31})"),
)
_NAME_EDGE = "A-Za-z0-9_-"
# a distinctive host name (``node7``, ``gpu-node-017``) is also replaced inside the
# longer names it is part of (``node7-ib0``, ``bmc_node7``); a short one (``a100``,
# ``n7``) only as a word of its own, or ``A100-SXM4-80GB`` would lose its GPU model
_PART_EDGE = "A-Za-z0-9"
_DISTINCT = re.compile(r"^(?=.*[0-9])(?=.*[a-z]).{5,}$|^[a-z0-9]+(?:[-_][a-z0-9]+)+$")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# what follows ``name.`` in a file name, not a DNS domain (``node7.log``, ``n7.tar.gz``)
_FILE_SUFFIXES = frozenset({
    "gz", "tgz", "xz", "bz2", "zst", "zip", "tar", "json", "log", "txt", "yaml", "yml",
    "toml", "csv", "prom", "html", "xml", "conf", "cfg", "ini", "service", "socket",
    "target", "mount", "timer", "slice", "scope", "sh", "py", "so", "pid", "lock",
    "sock", "out", "err", "bak", "old", "tmp", "part", "d", "db", "sqlite", "pem", "crt",
    "key", "pub", "img", "iso", "deb", "rpm", "ko"})
# domains whose names are the stack's vocabulary (``nvidia.com/gpu``), not the site's
_KEPT_DOMAINS = frozenset({"nvidia.com", "k8s.io", "kubernetes.io", "x-k8s.io",
                           "docker.io", "nvcr.io", "github.com", "cluster.local",
                           "svc.cluster.local"})


class Redactor:
    """The consistent mapping of one snapshot's identities to tokens."""

    def __init__(self, hostnames: Iterable[str] = (), users: Iterable[str] = ()) -> None:
        # one table per token family; ip6 counts as "ip", guid as "mac", domain as
        # "hostname"
        self._maps: dict[str, dict[str, str]] = {
            k: {} for k in (*KINDS, "ip6", "guid", "domain")}
        self._hosts: dict[str, str] = {}  # lowercased host name -> its token
        self._users: dict[str, str] = {}  # lowercased user name -> its token
        self._patterns: dict[str, re.Pattern[str]] = {}  # compiled from the tables
        for name in hostnames:
            self.add_hostname(name)
        for name in users:
            self.add_user(name)

    # -- learning the names ----------------------------------------------------------
    def add_hostname(self, name: str | None) -> None:
        """A host name to replace (an FQDN also gives its first label and its domain)."""
        name = (name or "").strip().rstrip(".")
        if name.lower() in _GENERIC:
            return
        short, _, domain = name.partition(".")
        token = self._name_token("hostname", short)
        if domain and token is not None and not self._add_domain(domain, own=True):
            self._hosts[name.lower()] = f"{token}.domain.invalid"  # a one-label domain
            self._patterns.clear()

    def add_user(self, name: str | None) -> None:
        """A user name to replace (system accounts are left alone)."""
        name = (name or "").strip()
        if not name.lower().startswith(("systemd", "nvidia")):
            self._name_token("user", name)

    def _name_token(self, kind: str, name: str) -> str | None:
        key = name.lower()
        if key in _GENERIC or len(key) < 2:
            return None
        table = self._hosts if kind == "hostname" else self._users
        if key not in table:
            prefix = "host" if kind == "hostname" else kind
            table[key] = self._token(kind, key, lambda n: f"{prefix}-{n}")
            self._patterns.clear()
        return table[key]

    def _add_domain(self, domain: str, own: bool = False) -> bool:
        """Learn a DNS domain to replace; False for one that cannot be told from other
        dotted words (one label, a file suffix, the stack's own domains)."""
        key = domain.lower().rstrip(".")
        labels = key.split(".")
        if len(labels) < 2 or key in _KEPT_DOMAINS or not re.fullmatch(
                rf"{_LABEL}(?:\.{_LABEL})+", key):
            return False
        if not own and (labels[-1] in _FILE_SUFFIXES or not labels[-1].isalpha()):
            return False
        if key not in self._maps["domain"]:
            self._token("domain", key,
                        lambda n: "domain.invalid" if n == 1 else f"domain{n}.invalid")
            self._patterns.clear()
        return True

    def learn(self, manifest: dict, payloads: dict[str, bytes]) -> None:
        """Find the names a snapshot holds: its host name, the DNS domain of the names
        the host is part of (``node7-ib0.corp.example.com``), every name in that domain,
        and user names in paths and ``USER=``-style fields."""
        self.add_hostname(manifest.get("host"))
        self.add_hostname(_decode(payloads.get("hostname", b"")))
        texts = [_decode(data) for data in payloads.values()]
        for text in texts:
            for pattern in _USER_RES:
                for match in pattern.finditer(text):
                    self.add_user(match.group(1))
        lows = [text.lower() for text in texts]  # cheap guards: the passes are slow
        if self._hosts:
            fqdn = self._pattern("fqdn")
            for text, low in zip(texts, lows, strict=True):
                if any(h in low for h in self._hosts):
                    for match in fqdn.finditer(text):
                        self._add_domain(match["domain"])
        if self._maps["domain"]:
            in_domain = self._pattern("domain")
            for text, low in zip(texts, lows, strict=True):
                if any(d in low for d in self._maps["domain"]):
                    for match in in_domain.finditer(text):
                        self._lead(match["lead"])

    def _lead(self, lead: str | None) -> str | None:
        """The token of the labels before a known domain: the host names it holds
        replaced, else (another host of the site) a host token of its own."""
        if not lead:
            return lead
        if self._hosts:
            replaced = self._pattern("host").sub(self._host, lead)
            if replaced != lead:
                return replaced
        return self._name_token("hostname", lead) or lead

    def _pattern(self, which: str) -> re.Pattern[str]:
        """The compiled pattern ``which`` of the names learned so far: ``host`` (host
        names), ``user``, ``domain`` (a name in a learned domain, or the domain alone),
        ``fqdn`` (a name holding a host name, then a domain)."""
        if which not in self._patterns:
            self._patterns[which] = re.compile(self._source(which), re.IGNORECASE)
        return self._patterns[which]

    def _source(self, which: str) -> str:
        def alt(names: Iterable[str]) -> str:
            ordered = sorted(names, key=len, reverse=True)
            return "|".join(re.escape(n) for n in ordered) if ordered else "(?!)"

        hosts = alt(self._hosts)
        if which == "user":
            return rf"(?<![{_NAME_EDGE}])(?:{alt(self._users)})(?![{_NAME_EDGE}])"
        if which == "host":
            parts = alt(n for n in self._hosts if _DISTINCT.match(n))
            words = alt(n for n in self._hosts if not _DISTINCT.match(n))
            return (rf"(?<![{_PART_EDGE}])(?:{parts})(?![{_PART_EDGE}])"
                    rf"|(?<![{_NAME_EDGE}])(?:{words})(?![{_NAME_EDGE}])")
        end = r"(?![\w-]|\.\w)"
        if which == "fqdn":
            return (rf"(?<![\w.-])(?:[A-Za-z0-9]+[-_])*(?:{hosts})(?:[-_][A-Za-z0-9]+)*"
                    rf"\.(?P<domain>{_LABEL}(?:\.{_LABEL})+){end}")
        return (rf"(?<![\w.-])(?:(?P<lead>{_LABEL}(?:\.{_LABEL})*)\.)?"
                rf"(?P<domain>{alt(self._maps['domain'])}){end}")

    # -- replacing -------------------------------------------------------------------
    def _token(self, kind: str, key: str, make: Callable[[int], str]) -> str:
        table = self._maps[kind]
        if key not in table:
            table[key] = make(len(table) + 1)
        return table[key]

    def counts(self) -> dict[str, int]:
        """How many distinct values of each kind were replaced."""
        merged = {"ip6": "ip", "guid": "mac", "domain": "hostname"}
        counts = dict.fromkeys(KINDS, 0)
        for kind, table in self._maps.items():
            counts[merged.get(kind, kind)] += len(table)
        return counts

    def text(self, text: str) -> str:
        """``text`` with every identity replaced by its token."""
        low = text.lower()  # cheap guards: skip the passes that cannot match
        if "gpu-" in low or "mig-" in low:
            text = _UUID_RE.sub(self._uuid, text)
        if "serial" in low:
            text = _XML_SERIAL_RE.sub(lambda m: m[1] + self.serial(m[3]) + m[4], text)
            for pattern in (_COLON_SERIAL_RE, _EQUALS_SERIAL_RE, _IS_SERIAL_RE, _DSN_RE):
                text = pattern.sub(lambda m: m[1] + self.serial(m[2]), text)
        if "guid" in low:
            text = _GUID_RE.sub(lambda m: m[1] + self._guid(m[2]), text)
        if ":" in text:
            text = _IPV6_RE.sub(self._ipv6, text)
            text = _MAC_RE.sub(lambda m: self._mac(m[1]), text)
        if "-" in text:
            text = _MAC_DASH_RE.sub(lambda m: self._mac(m[1]), text)
        if "." in text:
            text = _MAC_DOT_RE.sub(lambda m: self._mac(m[1]), text)
            text = _IPV4_RE.sub(self._ipv4, text)
            if any(d in low for d in self._maps["domain"]):
                text = self._pattern("domain").sub(self._in_domain, text)
        if any(h in low for h in self._hosts):
            text = self._pattern("host").sub(self._host, text)
        if self._users:
            text = self._pattern("user").sub(lambda m: self._users[m[0].lower()], text)
        return text

    def _host(self, m: re.Match[str]) -> str:
        return self._hosts[m[0].lower()]

    def _in_domain(self, m: re.Match[str]) -> str:
        lead = self._lead(m["lead"])
        domain = self._maps["domain"][m["domain"].lower()]
        return f"{lead}.{domain}" if lead else domain

    def serial(self, value: str) -> str:
        """The token of a serial number, in its shape (placeholders stay)."""
        if value.strip().lower() in _NO_SERIAL:
            return value
        return self._token("serial", value, lambda n: _shaped(value, n))

    def _uuid(self, m: re.Match[str]) -> str:
        token = self._token("gpu-uuid", m[2].lower(),
                            lambda n: f"00000000-0000-0000-0000-{n:012x}")
        return f"{m[1]}-{token}"

    def _guid(self, value: str) -> str:
        return self._token("guid", value.lower(), lambda n: f"0x0200000000{n:06x}")

    def _mac(self, value: str) -> str:
        """A MAC (or IPoIB) address's token in the value's own notation: ``:`` or ``-``
        between bytes, or Cisco's ``.`` between groups of four; one token per address
        whatever the notation it is met in."""
        digits = re.sub(r"[^0-9a-f]", "", value.lower())
        if len(set(digits)) == 1 and digits[0] in "0f":
            return value  # unset or broadcast
        width = len(digits) // 2 - 1

        def make(n: int) -> str:
            return "02" + f"{n:0{2 * width}x}"[-2 * width:]
        token = self._token("mac", digits, make)
        if "." in value:
            return ".".join(token[i:i + 4] for i in range(0, len(token), 4))
        sep = "-" if "-" in value else ":"
        return sep.join(token[i:i + 2] for i in range(0, len(token), 2))

    def _ipv4(self, m: re.Match[str]) -> str:
        addr = ipaddress.IPv4Address(m[1])
        if addr.is_loopback or addr.is_unspecified or str(addr).startswith("255."):
            return m[0]
        return self._token("ip", str(addr),
                           lambda n: str(ipaddress.IPv4Address("198.18.0.0") + n))

    def _ipv6(self, m: re.Match[str]) -> str:
        value = m[0]
        groups = value.split(":")
        if all(len(g) == 2 for g in groups):
            return value  # a hardware address: the MAC pass takes it
        try:
            addr = ipaddress.IPv6Address(value)
        except ValueError:
            return value
        if addr.is_loopback or addr.is_unspecified:
            return value
        base = "fe80::" if addr.is_link_local else "2001:db8::"
        token = self._token("ip6", addr.exploded,
                            lambda n: str(ipaddress.IPv6Address(base) + n))
        return ipaddress.IPv6Address(token).exploded if "::" not in value else token

    def data(self, value: Any, key: str = "") -> Any:
        """A JSON document with every string (keys too) redacted; a string under a
        serial-like key is a serial number."""
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.data(v, str(k))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self.data(v, key) for v in value]
        if isinstance(value, str):
            if "serial" in key.lower():
                return self.serial(value)
            return self.text(value)
        return value

    def payload(self, data: bytes, is_json: bool = False) -> bytes:
        """One source's bytes, redacted; a JSON source stays valid JSON."""
        text = _decode(data)
        if is_json:
            try:
                doc = safejson.loads(text)
            except ValueError:
                pass  # NVML's init error text, a broken capture: redact it as text
            else:
                return (json.dumps(self.data(doc), indent=1) + "\n").encode()
        return self.text(text).encode("utf-8", errors="surrogateescape")

    def snapshot(self, manifest: dict, payloads: dict[str, bytes]) -> tuple[dict, dict]:
        """The redacted manifest and payloads of one snapshot (learns its names first)."""
        from gputriage import __version__, sources

        self.learn(manifest, payloads)
        out = {name: self.payload(data, sources.get(name).suffix == ".json")
               for name, data in payloads.items()}
        redacted = self.data(manifest)
        redacted["redacted"] = {"by": "gputriage", "version": __version__,
                                "kinds": list(KINDS), "replaced": self.counts()}
        return redacted, out


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")


def _shaped(value: str, n: int) -> str:
    """A token with the shape of ``value``: digits stay digits, hex digits between
    separators stay hex (same length); anything else becomes ``REDACTED-SN-n``."""
    if value.isdigit():
        return str(n).zfill(len(value))
    if re.fullmatch(r"[0-9A-Fa-f]+(?:[-:][0-9A-Fa-f]+)+", value):
        digits = sum(c not in "-:" for c in value)
        fill = iter(f"{n:0{digits}x}"[-digits:])
        return "".join(c if c in "-:" else next(fill) for c in value)
    return f"REDACTED-SN-{n:04d}"
