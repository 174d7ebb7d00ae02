#!/usr/bin/python3
# capstan's TEST REPORTER in the cloud image (`capstan ramdisk cloud-image`): once cloud-init's
# final stage is over, it prints on the serial console what the bootstrap data left on this machine,
# so that an end-to-end test can check it from outside without logging in:
#   capstan-report: file PATH MODE OWNER:GROUP SHA256     (every write_files entry of the user data)
#   capstan-report: missing PATH
#   capstan-report: user NAME SHELL GROUPS                (every users entry, "missing" if absent)
#   capstan-report: command N TEXT                        (runcmd, in order)
#   capstan-report: sentinel present|absent
#   capstan-report: cloud-init status STATUS
#   capstan-report: done
import grp
import hashlib
import os
import pwd
import subprocess

import yaml

USER_DATA = "/var/lib/cloud/instance/user-data.txt"
# What cloud-init merged from every part of a MIME multipart user data (a NoCloud medium's).
MERGED_CLOUD_CONFIG = "/var/lib/cloud/instance/cloud-config.txt"
SENTINEL = "/run/cluster-api/bootstrap-success.complete"


def report(line):
    text = f"capstan-report: {line}\n"
    with open("/dev/console", "w") as console:
        console.write(text)


def main():
    data = {}
    for path in (USER_DATA, MERGED_CLOUD_CONFIG):
        try:
            with open(path) as f:
                text = f.read()
            # A `## template: jinja` first line is a comment to YAML anyway.
            data = yaml.safe_load(text)
        except (OSError, yaml.YAMLError) as e:
            data = None
            report(f"{path} unreadable: {e}")
        if isinstance(data, dict):
            break
    if not isinstance(data, dict):
        data = {}
    for entry in data.get("write_files") or []:
        path = entry.get("path", "")
        if not os.path.exists(path):
            report(f"missing {path}")
            continue
        st = os.stat(path)
        owner = f"{pwd.getpwuid(st.st_uid).pw_name}:{grp.getgrgid(st.st_gid).gr_name}"
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        report(f"file {path} {st.st_mode & 0o777:04o} {owner} {digest}")
    for user in data.get("users") or []:
        name = user.get("name") if isinstance(user, dict) else user
        if name == "default":
            continue
        try:
            entry = pwd.getpwnam(name)
            groups = ",".join(g.gr_name for g in grp.getgrall() if name in g.gr_mem)
            report(f"user {name} {entry.pw_shell} {groups or '-'}")
        except KeyError:
            report(f"user {name} missing")
    for n, command in enumerate(data.get("runcmd") or []):
        text = command if isinstance(command, str) else " ".join(command)
        report(f"command {n} {text}")
    report(f"sentinel {'present' if os.path.exists(SENTINEL) else 'absent'}")
    status = subprocess.run(["cloud-init", "status"], capture_output=True, text=True).stdout.strip()
    report(f"cloud-init {status}")
    report("done")


if __name__ == "__main__":
    main()
