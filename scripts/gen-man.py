#!/usr/bin/env python3
"""Man pages for stowd and stowfs, made from their own help (swift-argument-parser's
--experimental-dump-help), so a page never disagrees with `--help`.

    scripts/gen-man.py --bin .build/release --out DIR

writes DIR/man1/stowfs.1, DIR/man1/stowfs-<command>.1 (one per command, e.g. stowfs-mount.1,
stowfs-config-check.1) and DIR/man8/stowd.8. The date on each page is the last commit's (or
SOURCE_DATE_EPOCH), so two runs on one commit make the same files.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys


def roff(text):
    """Text for a roff body line: backslashes and a leading dot or quote made literal."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    lines = []
    for line in text.split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def paragraphs(text):
    """The discussion as roff: blank lines split paragraphs; runs of indented lines (examples) are
    kept as they are, the other lines are filled."""
    out = []
    for block in text.strip("\n").split("\n\n"):
        runs = []  # (indented, [lines])
        for line in block.split("\n"):
            indented = line.startswith("  ")
            if runs and runs[-1][0] == indented:
                runs[-1][1].append(line)
            else:
                runs.append((indented, [line]))
        for indented, lines in runs:
            if indented:
                out.append(".PP\n.RS 4\n.nf\n" + roff("\n".join(l[2:] for l in lines)) + "\n.fi\n.RE")
            elif any(l.strip() for l in lines):
                out.append(".PP\n" + roff(" ".join(l.strip() for l in lines)))
    return "\n".join(out)


def flag_names(arg):
    names = []
    for n in arg.get("names", []):
        names.append(("-" if n["kind"] == "short" else "--") + n["name"])
    return names


def synopsis_item(arg):
    if arg["kind"] == "positional":
        item = "\\fI" + arg["valueName"] + "\\fR"
    else:
        pref = arg.get("preferredName") or arg["names"][0]
        name = ("-" if pref["kind"] == "short" else "--") + pref["name"]
        item = "\\fB" + name.replace("-", "\\-") + "\\fR"
        if arg["kind"] == "option":
            item += " \\fI" + arg["valueName"] + "\\fR"
    if arg.get("isRepeating"):
        item += " ..."
    return "[" + item + "]" if arg.get("isOptional") else item


def options_section(args):
    out = []
    for arg in args:
        if not arg.get("shouldDisplay", True):
            continue
        if arg["kind"] == "positional":
            head = "\\fI" + arg["valueName"] + "\\fR"
        else:
            head = ", ".join("\\fB" + n.replace("-", "\\-") + "\\fR" for n in flag_names(arg))
            if arg["kind"] == "option":
                head += " \\fI" + arg["valueName"] + "\\fR"
        body = roff(arg.get("abstract", ""))
        if arg.get("discussion"):
            body += "\n.br\n" + roff(arg["discussion"] if isinstance(arg["discussion"], str) else "")
        if arg.get("allValues"):
            body += "\n.br\nOne of: " + roff(", ".join(arg["allValues"])) + "."
        if "defaultValue" in arg and arg["kind"] != "flag":
            body += "\n.br\nDefault: " + roff(str(arg["defaultValue"])) + "."
        out.append(".TP\n" + head + "\n" + body)
    return "\n".join(out)


def page(cmd, path, section, date, version, see_also):
    title = "-".join(path).upper()
    full = " ".join(path)
    lines = [
        '.\\" Made by scripts/gen-man.py from `%s --experimental-dump-help`; do not edit.' % path[0],
        '.TH "%s" "%s" "%s" "StowFS %s" "StowFS Manual"' % (title, section, date, version),
        ".SH NAME",
        "%s \\- %s" % ("\\-".join(path), roff(cmd.get("abstract", ""))),
        ".SH SYNOPSIS",
    ]
    subs = [s for s in cmd.get("subcommands", []) if s.get("shouldDisplay", True) and s["commandName"] != "help"]
    args = [a for a in cmd.get("arguments", []) if a.get("shouldDisplay", True)]
    items = " ".join(synopsis_item(a) for a in args if a["kind"] != "flag" or a["names"][0]["name"] not in ("help", "version"))
    if subs:
        lines.append(".B %s\n\\fICOMMAND\\fR [\\fIOPTIONS\\fR]" % full)
    else:
        lines.append(".B %s\n%s" % (full, items))
    if cmd.get("discussion"):
        lines += [".SH DESCRIPTION", paragraphs(cmd["discussion"])]
    if subs:
        lines.append(".SH COMMANDS")
        for s in subs:
            lines.append(".TP\n\\fB%s %s\\fR\n%s\nSee \\fB%s\\-%s\\fR(%s)." % (
                full, s["commandName"], roff(s.get("abstract", "")), "\\-".join(path), s["commandName"], section))
    if args:
        lines += [".SH OPTIONS", options_section(args)]
    if see_also:
        lines += [".SH SEE ALSO", ", ".join("\\fB%s\\fR(%s)" % (n.replace("-", "\\-"), s) for n, s in see_also) + "."]
    return "\n".join(lines) + "\n"


def dump(binary):
    out = subprocess.run([binary, "--experimental-dump-help"], check=True, capture_output=True).stdout
    return json.loads(out)["command"]


def page_date():
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        try:
            epoch = subprocess.run(["git", "log", "-1", "--format=%ct"], capture_output=True, text=True,
                                   cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        except OSError:
            epoch = ""
    when = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc) if epoch else datetime.datetime.now(datetime.timezone.utc)
    return when.strftime("%Y-%m-%d")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="folder with the stowd and stowfs binaries")
    ap.add_argument("--out", required=True, help="folder to write man1/ and man8/ into")
    a = ap.parse_args()
    version = subprocess.run([os.path.join(a.bin, "stowfs"), "--version"], check=True,
                             capture_output=True, text=True).stdout.strip()
    date = page_date()
    written = []

    def write(section, name, text):
        folder = os.path.join(a.out, "man" + section)
        os.makedirs(folder, exist_ok=True)
        target = os.path.join(folder, name + "." + section)
        with open(target, "w") as f:
            f.write(text)
        written.append(target)

    stowfs = dump(os.path.join(a.bin, "stowfs"))

    def walk(cmd, path):
        subs = [s for s in cmd.get("subcommands", []) if s.get("shouldDisplay", True) and s["commandName"] != "help"]
        see = [("stowfs", "1"), ("stowd", "8"), ("mount.fuse.stowfs", "8")] if len(path) > 1 else [("stowd", "8"), ("fuse", "8")]
        see += [("-".join(path + [s["commandName"]]), "1") for s in subs]
        write("1", "-".join(path), page(cmd, path, "1", date, version, [s for s in see if s[0] != "-".join(path)]))
        for s in subs:
            walk(s, path + [s["commandName"]])

    walk(stowfs, ["stowfs"])
    stowd = dump(os.path.join(a.bin, "stowd"))
    write("8", "stowd", page(stowd, ["stowd"], "8", date, version, [("stowfs", "1")]))
    # mount -t fuse.stowfs runs this helper with stowfs mount's options.
    write("8", "mount.fuse.stowfs", ".so man1/stowfs-mount.1\n")
    print("\n".join(written))


if __name__ == "__main__":
    sys.exit(main())
