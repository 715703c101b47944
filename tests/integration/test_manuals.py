"""Manuals suite: the man pages, the bash completion and their install.

The pages are hand-written, so this suite keeps them honest: they format
without a groff warning, every option `vmemd --help` prints has an entry
in vmemd(8), every command and option `vmem help` prints is in vmem(1),
the completion offers the same commands, subcommands and options, and
`meson install` puts everything where it belongs.

Paths: VMEMD and VMEM name the binaries (meson passes them); the source
tree is VMEM_SOURCE_ROOT, else MESON_SOURCE_ROOT, else two levels above
this file; the build tree is VMEM_BUILD_ROOT, else MESON_BUILD_ROOT, else
the directory above VMEMD's. Needs groff (Debian: groff-base) and bash.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmemtest as vt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = (os.environ.get("VMEM_SOURCE_ROOT")
       or os.environ.get("MESON_SOURCE_ROOT")
       or os.path.normpath(os.path.join(HERE, "..", "..")))
VMEM_1 = os.path.join(SRC, "docs", "man", "vmem.1")
VMEMD_8 = os.path.join(SRC, "docs", "man", "vmemd.8")
COMPLETION = os.path.join(SRC, "client", "completion", "vmem.bash")

# An option token: -m, --max-x; not the dash inside A-B or write-once.
OPTION_RE = re.compile(r"(?<![\w-])--?[a-z][a-z-]*")


def build_root():
    for var in ("VMEM_BUILD_ROOT", "MESON_BUILD_ROOT"):
        if os.environ.get(var):
            return os.environ[var]
    if os.sep in vt.VMEMD:
        root = os.path.dirname(os.path.dirname(os.path.abspath(vt.VMEMD)))
        if os.path.isdir(os.path.join(root, "meson-info")):
            return root
    return None


def run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=vt.scaled(60), **kw)


# --------------------------------------------------------------------------
# A little roff reader: enough of man(7) to find sections and .TP tags.

ESCAPES = [
    (re.compile(r"\\f(\(..|\[[^]]*\]|.)"), ""),
    (re.compile(r"\\\((em|en)"), "-"),
    (re.compile(r"\\-"), "-"),
    (re.compile(r"\\[%&]"), ""),
    (re.compile(r"\\ "), " "),
    (re.compile(r"\\e"), "\\\\"),
]
ALTERNATING = {"BR", "BI", "IB", "IR", "RB", "RI"}


def roff_text(line):
    """The text a roff line prints, without fonts or escapes."""
    if line.startswith((".", "'")):
        parts = line[1:].split(None, 1)
        name = parts[0] if parts else ""
        args = parts[1] if len(parts) > 1 else ""
        words = [w[1:-1] if w.startswith('"') else w
                 for w in re.findall(r'"[^"]*"|\S+', args)]
        if name in ALTERNATING:
            line = "".join(words)
        elif name in ("B", "I", "SH", "SS"):
            line = " ".join(words)
        else:
            line = ""
    for pattern, repl in ESCAPES:
        line = pattern.sub(repl, line)
    return line


def read_page(path):
    """{section: {"text": str, "tags": [str]}} of a man page."""
    with open(path, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if not l.startswith('.\\"')]
    sections = {}
    current = None
    tag_next = False
    for line in lines:
        if line.startswith(".SH"):
            current = roff_text(line).strip()
            sections[current] = {"text": "", "tags": []}
            tag_next = False
            continue
        if current is None:
            continue
        m = re.match(r"\.(TP|TQ)\b", line)
        if m:
            tag_next = m.group(1)
            continue
        text = roff_text(line)
        tags = sections[current]["tags"]
        if tag_next == "TQ" and tags:
            tags[-1] += " " + text.strip()
        elif tag_next:
            tags.append(text.strip())
        tag_next = False
        sections[current]["text"] += text + "\n"
    return sections


def page_text(sections):
    return "".join(s["text"] for s in sections.values())


# --------------------------------------------------------------------------
# What the programs say about themselves.

def vmemd_help_options():
    r = run([vt.VMEMD, "--help"])
    assert r.returncode == 0, r.stderr
    opts = set(OPTION_RE.findall(r.stdout))
    assert opts, "no option in vmemd --help:\n" + r.stdout
    return opts | {"--help", "--version"}


def vmem_help():
    """(commands, options) of `vmem help`.

    commands: {name: {"subcommands": set, "options": set}}, from the
    "commands:" block; options: the options of the "options:" block.
    """
    r = run([vt.VMEM, "help"])
    assert r.returncode == 0, r.stderr
    commands, options = {}, set()
    block, current = None, None
    for line in r.stdout.splitlines():
        if line in ("commands:", "options:"):
            block = line[:-1]
            continue
        if not line.strip():
            block = current = None
            continue
        if block == "commands":
            if re.match(r"  \S", line):
                synopsis = re.split(r"\s{2,}", line.strip())[0]
                words = re.split(r"[\s|\[\]]+", synopsis)
                current = {
                    "subcommands": {w for w in words[1:]
                                    if re.fullmatch(r"[a-z][a-z-]*", w)},
                    "options": set(),
                }
                commands[words[0]] = current
            if current is not None:
                current["options"] |= set(OPTION_RE.findall(line))
        elif block == "options":
            options |= set(OPTION_RE.findall(line.split("  ", 2)[1]
                                             if line.startswith("  ")
                                             else line))
    assert commands, "no commands in vmem help:\n" + r.stdout
    assert options, "no options in vmem help:\n" + r.stdout
    return commands, options


def complete(*words):
    """What the completion offers for `vmem WORDS...` (the last word is
    the one being completed), in a bash without any start-up file."""
    script = (
        'source "$1" || exit 3\n'
        'shift\n'
        'COMP_WORDS=(vmem "$@")\n'
        'COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))\n'
        'COMP_LINE="${COMP_WORDS[*]}"\n'
        'COMP_POINT=${#COMP_LINE}\n'
        'spec=$(complete -p vmem) || exit 4\n'
        'fn=${spec#*-F }; fn=${fn%% *}\n'
        '"$fn" vmem "${COMP_WORDS[COMP_CWORD]}" '
        '"${COMP_WORDS[COMP_CWORD-1]}"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n')
    r = run(["bash", "--norc", "--noprofile", "-c", script, "bash",
             COMPLETION] + list(words))
    if r.returncode != 0:
        raise AssertionError("completion of %r failed (%d): %s"
                             % (words, r.returncode, r.stderr))
    return set(r.stdout.split())


# --------------------------------------------------------------------------

class Pages(unittest.TestCase):
    def test_groff_no_warnings(self):
        groff = shutil.which("groff")
        self.assertIsNotNone(groff, "groff not found (Debian: groff-base)")
        for page in (VMEM_1, VMEMD_8):
            with self.subTest(page=os.path.basename(page)):
                r = run([groff, "-man", "-ww", "-z", page])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, "")
                # Formatting for a terminal finds line-breaking trouble.
                r = run([groff, "-man", "-ww", "-Tutf8", page])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, "")
                self.assertGreater(len(r.stdout), 1000)

    def test_man_no_warnings(self):
        if not shutil.which("man"):
            self.skipTest("man (man-db) not installed")
        env = dict(os.environ, MANPAGER="cat", PAGER="cat", MANWIDTH="80")
        for page in (VMEM_1, VMEMD_8):
            with self.subTest(page=os.path.basename(page)):
                r = run(["man", "--warnings", "-l", page], env=env)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, "")
                name = os.path.basename(page).split(".")[0].upper()
                self.assertIn(name, r.stdout)

    def test_required_sections(self):
        wanted = {
            VMEMD_8: ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS",
                      "CONFIGURATION", "SIGNALS", "FILES", "ENVIRONMENT",
                      "EXIT STATUS", "SEE ALSO"],
            VMEM_1: ["NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS",
                     "OPTIONS", "EXIT STATUS", "ENVIRONMENT", "EXAMPLES",
                     "SEE ALSO"],
        }
        for page, names in wanted.items():
            sections = read_page(page)
            for name in names:
                with self.subTest(page=os.path.basename(page), section=name):
                    self.assertIn(name, sections)
                    self.assertTrue(sections[name]["text"].strip())

    def test_vmemd_options_documented(self):
        sections = read_page(VMEMD_8)
        tags = " ".join(sections["OPTIONS"]["tags"])
        documented = set(OPTION_RE.findall(tags))
        for opt in sorted(vmemd_help_options()):
            with self.subTest(option=opt):
                self.assertIn(opt, documented,
                              "vmemd --help prints %s; vmemd(8) OPTIONS "
                              "has no entry for it" % opt)

    def test_vmemd_config_keys_match_options(self):
        # Each limit option has its configuration key, and vice versa.
        sections = read_page(VMEMD_8)
        config = sections["CONFIGURATION"]["text"]
        for opt in sorted(vmemd_help_options()):
            if opt in ("--repo", "--socket", "--foreground", "--config",
                       "--help", "--version"):
                continue
            key = opt[2:].replace("-", "_")
            with self.subTest(option=opt):
                self.assertRegex(config, r"\b%s\b" % key)

    def test_vmemd_facts(self):
        text = page_text(read_page(VMEMD_8))
        for fact in ("<gitdir>/vmem/wal", "<gitdir>/vmem/lock",
                     "<gitdir>/vmem/quarantine/", "<gitdir>/vmem/vmemd.log",
                     "$XDG_RUNTIME_DIR/vmem/KEY.sock", "/tmp/vmem-UID/",
                     "SIGTERM", "SIGHUP", "VMEM_REPO", "VMEM_SOCKET",
                     "XDG_CONFIG_HOME", "JOURNAL_STREAM", "NOTIFY_SOCKET",
                     "LISTEN_FDS", "0700", "0600"):
            with self.subTest(fact=fact):
                self.assertIn(fact, text)
        exit_tags = read_page(VMEMD_8)["EXIT STATUS"]["tags"]
        self.assertEqual(exit_tags, ["0", "1", "2", "3"])

    def test_vmem_commands_documented(self):
        commands, _ = vmem_help()
        sections = read_page(VMEM_1)
        tags = {}
        for tag in sections["COMMANDS"]["tags"]:
            if tag.split():
                tags.setdefault(tag.split()[0], "")
                tags[tag.split()[0]] += " " + tag
        for name, info in sorted(commands.items()):
            with self.subTest(command=name):
                self.assertIn(name, tags, "vmem help lists %s; vmem(1) "
                              "COMMANDS has no entry for it" % name)
                for sub in sorted(info["subcommands"]):
                    self.assertRegex(tags[name], r"\b%s\b" % re.escape(sub))
                for opt in sorted(info["options"] - {"--json"}):
                    self.assertIn(opt, OPTION_RE.findall(tags[name]),
                                  "%s's option %s is not in its entry"
                                  % (name, opt))

    def test_vmem_options_documented(self):
        _, options = vmem_help()
        sections = read_page(VMEM_1)
        documented = set(OPTION_RE.findall(
            " ".join(sections["OPTIONS"]["tags"])))
        for opt in sorted(options):
            with self.subTest(option=opt):
                self.assertIn(opt, documented)

    def test_vmem_environment(self):
        tags = read_page(VMEM_1)["ENVIRONMENT"]["tags"]
        for var in ("VMEM_REPO", "VMEM_SOCKET", "VMEM_AGENT_ID",
                    "VMEM_NO_AUTOSTART", "VMEMD"):
            with self.subTest(var=var):
                self.assertIn(var, tags)
        self.assertEqual(read_page(VMEM_1)["EXIT STATUS"]["tags"],
                         ["0", "1", "2"])


class Completion(unittest.TestCase):
    def test_loads_cleanly(self):
        r = run(["bash", "--norc", "--noprofile", "-c",
                 'source "$1" && complete -p vmem', "bash", COMPLETION])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        self.assertIn("-F", r.stdout)
        self.assertTrue(r.stdout.rstrip().endswith(" vmem"), r.stdout)

    def test_commands(self):
        commands, _ = vmem_help()
        offered = complete("")
        self.assertLessEqual(set(commands), offered)
        self.assertIn("service", offered)
        self.assertEqual(complete("sto"), {"store"})
        self.assertEqual(complete("--json", "--repo", "/", "st"),
                         {"store", "status"})

    def test_subcommands(self):
        commands, _ = vmem_help()
        self.assertEqual(commands["daemon"]["subcommands"],
                         {"start", "stop", "run"})
        for name, info in commands.items():
            if info["subcommands"]:
                with self.subTest(command=name):
                    self.assertEqual(complete(name, ""), info["subcommands"])
        self.assertEqual(complete("daemon", ""), {"start", "stop", "run"})
        self.assertEqual(complete("service", ""),
                         {"install", "uninstall", "status"})
        self.assertEqual(complete("--repo", "=", "/", "daemon", "s"),
                         {"start", "stop"})

    def test_command_options(self):
        commands, globals_ = vmem_help()
        long_globals = {o for o in globals_ if o.startswith("--")}
        offered = complete("store", "-")
        self.assertLessEqual({"--overwrite", "--if-version", "--context"},
                             offered)
        self.assertNotIn("--all", offered)
        for name, info in sorted(commands.items()):
            if name == "help":
                continue
            with self.subTest(command=name):
                self.assertLessEqual(info["options"] | long_globals,
                                     complete(name, "-"))
        self.assertLessEqual(long_globals, complete("-"))
        self.assertEqual(complete("store", "--ov"), {"--overwrite"})

    def test_values(self):
        tmp = tempfile.mkdtemp(prefix="vmemman-")
        try:
            os.mkdir(os.path.join(tmp, "subdir"))
            open(os.path.join(tmp, "afile"), "w").close()
            self.assertEqual(complete("--repo", tmp + "/"),
                             {tmp + "/subdir"})
            self.assertEqual(complete("--socket", tmp + "/a"),
                             {tmp + "/afile"})
            # An option's value is not a command.
            self.assertEqual(complete("--agent", ""), set())
            self.assertEqual(complete("--agent", "daemon", "ls", "--l"),
                             {"--limit"})
        finally:
            shutil.rmtree(tmp)


class Install(unittest.TestCase):
    WANTED = {
        VMEM_1: os.path.join("share", "man", "man1", "vmem.1"),
        VMEMD_8: os.path.join("share", "man", "man8", "vmemd.8"),
        COMPLETION: os.path.join("share", "bash-completion", "completions",
                                 "vmem"),
    }

    def setUp(self):
        self.build = build_root()
        if not self.build or not shutil.which("meson"):
            self.skipTest("no meson build tree (set VMEM_BUILD_ROOT)")

    def test_introspect(self):
        r = run(["meson", "introspect", "--installed", self.build])
        self.assertEqual(r.returncode, 0, r.stderr)
        installed = {os.path.realpath(k): v
                     for k, v in json.loads(r.stdout).items()}
        for src, dest in self.WANTED.items():
            with self.subTest(file=os.path.basename(src)):
                self.assertIn(os.path.realpath(src), installed)
                self.assertTrue(
                    installed[os.path.realpath(src)].endswith(os.sep + dest),
                    installed[os.path.realpath(src)])

    def test_install_destdir(self):
        dest = tempfile.mkdtemp(prefix="vmemman-")
        try:
            r = run(["meson", "install", "-C", self.build, "--no-rebuild",
                     "--quiet", "--tags", "man,completion",
                     "--destdir", dest])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            found = {}
            for top, _, files in os.walk(dest):
                for name in files:
                    path = os.path.join(top, name)
                    found[os.path.relpath(path, dest)] = path
            for src, want in self.WANTED.items():
                with self.subTest(file=want):
                    hits = [p for rel, p in found.items()
                            if rel.endswith(os.sep + want)]
                    self.assertEqual(len(hits), 1, sorted(found))
                    with open(src, "rb") as a, open(hits[0], "rb") as b:
                        self.assertEqual(a.read(), b.read())
        finally:
            shutil.rmtree(dest)


if __name__ == "__main__":
    vt.main()
