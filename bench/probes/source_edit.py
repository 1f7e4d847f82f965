"""Shared by the *_inst_source.py probes: loads a kernel source, replaces text that must occur
exactly `count` times (else exits naming the probe and the text), writes it back."""
import sys


class SourceEdit:
    def __init__(self, path, tool):
        self.path, self.tool = path, tool
        self.src = open(path).read()

    def sub(self, old, new, count=1):
        n = self.src.count(old)
        if n != count:
            sys.exit(f"{self.tool}: {old!r} found {n} times, expected {count}")
        self.src = self.src.replace(old, new)

    def write(self):
        open(self.path, "w").write(self.src)
