"""A git repository as a source: fetched with the `git` CLI (no shell, a timeout, only the
http(s) or local transport) into a cache under KB_VAR_DIR; a file is read again only when its
blob id differs from the one its document came from."""

from __future__ import annotations

import base64
import functools
import ipaddress
import logging
import os
import re
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from datasets.documents.links import git_file_url
from datasets.models import Source
from datasets.sources.base import (
    Deadline,
    Globs,
    Item,
    SyncFailed,
    file_item,
    hidden,
    too_many,
)
from datasets.sources.locations import Refused, is_url, local_repository
from datasets.sources.secrets import source_secret
from kbplatform.outbound import OutboundRefused, check_url, url_port

logger = logging.getLogger(__name__)

HEAD = "refs/kb/head"
PINNING_GIT = (2, 37)  # the first git with http.curloptResolve
# What git reads of a local repository to serve a fetch (hooks, config and the like: not).
READ_BY_GIT = ("HEAD", "packed-refs", "shallow", "info", "refs", "objects")


@functools.cache
def git_version() -> tuple[int, ...]:
    """The version of the `git` on PATH, as numbers ((0,) when it cannot be told)."""
    try:
        out = subprocess.run(["git", "--version"], capture_output=True, text=True, timeout=30,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return (0,)
    found = re.search(r"(\d+)\.(\d+)", out)
    return tuple(int(n) for n in found.groups()) if found else (0,)


def cache_dir(source: Source) -> Path:
    return settings.VAR_DIR / "sources" / "git" / str(source.pk)


class GitReader:
    def __init__(self, source: Source, deadline: Deadline) -> None:
        self.source, self.deadline = source, deadline
        self.cache = cache_dir(source)
        self.commit = ""
        self.partial = ""
        self.expected = 0
        self.globs = Globs(source.include)
        self.max_bytes = settings.KB_MAX_UPLOAD_BYTES
        self.hidden: tuple[str, ...] = ()  # the credential, as read and as sent

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        self.commit = self._fetch()
        files = self._tree()
        self.expected = len(files)
        sub = self.source.subfolder.strip("/")
        for path, (blob, size) in files.items():
            item = file_item(path, blob, size, known=known, max_bytes=self.max_bytes,
                             read=partial(self._git, "cat-file", "blob", blob))
            yield replace(item, url=git_file_url(self.source.location, self.commit,
                                                 f"{sub}/{path}" if sub else path))

    def _fetch(self) -> str:
        """The branch's commit, fetched into the cache (made on the first sync)."""
        url, protocol, pins = self._remote()
        if not (self.cache / "HEAD").exists():
            self.cache.mkdir(parents=True, exist_ok=True)
            self._git("init", "--bare", "--quiet", ".")
        branch = self.source.branch
        # A local repository is read from exactly its git folder (`--strict`: git tries no
        # `<path>/.git` nor `<path>.git` of its own).
        strict = ["--upload-pack=git-upload-pack --strict"] if protocol == "file" else []
        self._git("fetch", "--no-tags", "--quiet", "--no-recurse-submodules", *strict, "--",
                  url, f"+refs/heads/{branch}:{HEAD}", protocol=protocol, config=pins,
                  credential=self._authorization() if protocol != "file" else {})
        return self._git("rev-parse", "--verify", f"{HEAD}^{{commit}}").decode().strip()

    def _remote(self) -> tuple[str, str, list[str]]:
        """The URL or path to fetch, the one transport git may use for it and the options that
        pin git's connection to the addresses the outbound policy checked."""
        location = self.source.location
        if is_url(location):
            if git_version() < PINNING_GIT:
                logger.error("git %s cannot be pinned to an address (http.curloptResolve "
                             "needs git 2.37): git source %s not fetched",
                             ".".join(map(str, git_version())), self.source.pk)
                raise SyncFailed("could not connect to the repository")
            try:
                addresses = check_url(location)
            except OutboundRefused as exc:
                logger.warning("git source %s refused: %s", self.source.pk, exc)
                raise SyncFailed("could not connect to the repository") from None
            # git resolves the name again by itself: a name that rebinds in between would
            # lead it elsewhere. curl's resolve option makes it use the checked addresses.
            host = urlsplit(location).hostname or ""
            pinned = ",".join(f"[{a}]" if a.version == 6 else str(a) for a in addresses)
            pin = [] if _is_address(host) else [
                f"http.curloptResolve={host}:{url_port(location)}:{pinned}"]
            return location, location.split(":", 1)[0].lower(), pin
        try:  # the tenant's folders now: the settings or a link may have moved
            git_dir = local_repository(location, tenant=self.source.dataset.tenant.slug)
        except Refused as exc:
            raise SyncFailed(str(exc)) from None
        self._no_links_out(git_dir)
        return str(git_dir), "file", []

    def _authorization(self) -> dict[str, str]:
        """git's configuration, in its environment (no other user's process reads it there,
        as any could its arguments), that sends the source's credential on each request: HTTP
        Basic of `user:token` as the variable holds it, or of a token alone (GitHub, GitLab
        and Gitea take a token with any user name). {} without a credential."""
        if not self.source.secret_env:
            return {}
        secret = source_secret(self.source)
        pair = secret if ":" in secret else f"kbplatform:{secret}"
        basic = base64.b64encode(pair.encode()).decode()
        self.hidden = tuple(h for h in (secret, pair.partition(":")[2], basic) if h)
        return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"}

    def _no_links_out(self, git_dir: Path) -> None:
        """A symbolic link among what git serves of a repository (its refs and objects) would
        make it read another repository's: refused, whatever it points at."""
        for name in READ_BY_GIT:
            top = git_dir / name
            linked = top.is_symlink()
            walk = os.walk(top, onerror=_unreadable) if top.is_dir() and not linked else []
            for folder, names, files in walk:
                self.deadline.check()
                linked = any((Path(folder) / n).is_symlink() for n in (*names, *files))
                if linked:
                    break
            if linked:
                raise SyncFailed(f"the repository's {name} holds a symbolic link: git would "
                                 "read what it points at")

    def _tree(self) -> dict[str, tuple[str, int]]:
        """path (below the sub-folder) -> (blob id, size) of the files the globs take."""
        sub = self.source.subfolder.strip("/")
        out = self._git("ls-tree", "-r", "-l", "-z", "--full-tree", self.commit,
                        *(["--", sub] if sub else []))
        files: dict[str, tuple[str, int]] = {}
        prefix = f"{sub}/" if sub else ""
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, _, raw_path = record.partition(b"\t")
            mode, kind, blob, size = meta.decode().split()
            path = raw_path.decode("utf-8", "replace")
            # Files only: no symlinks (120000) or submodules; names as the ingestion takes.
            if kind != "blob" or mode == "120000" or not path.startswith(prefix):
                continue
            relative = path[len(prefix):]
            if hidden(relative):
                continue
            if self.globs(relative):
                files[relative] = (blob, int(size))
                if len(files) > settings.KB_SOURCE_MAX_FILES:
                    raise too_many()
        return files

    def _git(self, *args: str, protocol: str = "file", config: Sequence[str] = (),
             credential: Mapping[str, str] | None = None) -> bytes:
        """One git command in the cache, no shell, bounded in time, with no user or system
        config, no prompt, no hooks, redirects not followed, one transport allowed, and
        `config` (name=value) and `credential` (its environment) on top."""
        options = ["protocol.allow=never", f"protocol.{protocol}.allow=always",
                   "http.followRedirects=false", "core.hooksPath=/dev/null", *config]
        command = ["git", *(part for item in options for part in ("-c", item)),
                   "-C", str(self.cache), *args]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.cache),
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
               "GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": protocol, "LC_ALL": "C",
               **(credential or {})}
        timeout = min(settings.KB_SOURCE_GIT_TIMEOUT_SECONDS, self.deadline.left())
        try:
            done = subprocess.run(command, env=env, capture_output=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise SyncFailed(f"git {args[0]} took longer than {timeout:.0f} s") from None
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace")
            for hidden in self.hidden:  # git does not echo them; a host's error page might
                said = said.replace(hidden, "***")
            logger.warning("git %s of source %s failed: %s", args[0], self.source.pk,
                           said[-2000:])
            raise SyncFailed(self._failure(args[0], said))
        return done.stdout

    def _failure(self, command: str, said: str) -> str:
        """What the sync's log says of a failed git command (git's own words go to the
        operators' log only)."""
        if command != "fetch":
            return f"git {command} failed"
        name = self.source.secret_env
        if re.search(r"returned error: 40[13]\b|Authentication failed for|"
                     r"could not read (Username|Password)", said):
            return (f"the repository refused the credential in {name}" if name else
                    "the repository asks for a credential: name its variable (secret_env)")
        if name and re.search(r"returned error: 404\b|repository '[^']*' not found", said):
            return f"the repository was not found, or the credential in {name} cannot read it"
        return "could not fetch the branch"


def _unreadable(exc: OSError) -> None:
    raise SyncFailed(f"the repository's git folder could not be listed ({exc.strerror})")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
