#!/bin/bash
# Inside the check's container (run.sh): docs/service.md steps 1-5, cut from the page by
# docs_steps.py, run as they are written. The container has no network, so a few commands the page
# uses are stood in for by shell functions, each saying what it does instead:
#   sudo      we are root already: runs the command
#   apt       checks the packages are installed (the container was built with them); git is not
#             needed, the checkout is copied in
#   git clone copies the checkout (/root/check/checkout) to the target folder
#   editor    fills in memgate.env with the fakes' key and token, as a person would
# pip itself is not stood in for: PIP_NO_INDEX and PIP_FIND_LINKS make it install from the wheel
# folder built on the host, as docs/service.md describes for a server without PyPI.
# Between steps 2 and 3 the config is written as the page says: deploy/config.example.yaml copied
# before `memgate init`, then edited (Telegram on, with the fakes' addresses). The Telegram token's
# variable is unset while init runs, as it is for a person who has not written the env file yet.
set -euo pipefail
CHECK=/root/check
export MEMGATE_REPOSITORY=$CHECK/checkout
export PIP_NO_INDEX=1 PIP_FIND_LINKS=/opt/memgate/wheels PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_QUIET=1

sudo() { "$@"; }
apt() {
    [ "$1" = install ] || { echo "apt stand-in: only 'install' is known" >&2; return 1; }
    shift
    local package
    for package in "$@"; do
        [ "$package" = git ] && { echo "apt stand-in: git not needed, the checkout is copied in"; continue; }
        dpkg-query -W -f='${Status}\n' "$package" | grep -q 'install ok installed' \
            || { echo "apt stand-in: $package is not installed in the container" >&2; return 1; }
    done
}
git() {
    [ "$1" = clone ] && [ "$2" = "$MEMGATE_REPOSITORY" ] || { echo "git stand-in: only 'clone'" >&2; return 1; }
    mkdir -p "$(dirname "$3")" && cp -a "$2" "$3"
}
editor() {
    [ "$1" = /etc/memgate/memgate.env ] || { echo "editor stand-in: does not know $1" >&2; return 1; }
    local token
    token=$(cd /opt/memgate/src && /opt/memgate/.venv/bin/python -c 'from tests.fakes.telegram_api import TOKEN; print(TOKEN)')
    # A key shaped like a real one, so the check can look for it in the journal and the files.
    sed -i "s|^OPENAI_API_KEY=\$|OPENAI_API_KEY=sk-check-0123456789-never-logged|;
            s|^TELEGRAM_BOT_TOKEN=\$|TELEGRAM_BOT_TOKEN=$token|" "$1"
    grep -q '^TELEGRAM_BOT_TOKEN=.' "$1"
}
step() { sed 's/^/$ /' "$CHECK/steps/$1.sh"; . "$CHECK/steps/$1.sh"; }
# Wait until a command succeeds, polling; fail after $1 seconds.
wait_for() {
    local deadline=$(($(date +%s) + $1))
    shift
    until "$@"; do [ "$(date +%s)" -lt $deadline ] || return 1; sleep 0.1; done
}

step 1
step 2

# The fakes, as units of the container's systemd, from the checkout with the venv's Python.
fake() {
    local unit=$1
    shift
    systemctl stop "$unit" 2>/dev/null || true
    systemd-run --quiet --unit="$unit" --property=WorkingDirectory=/opt/memgate/src \
        /opt/memgate/.venv/bin/python -m "$@"
}
fake fake-llm tests.fakes.llm --port 8000
fake fake-telegram tests.fakes.telegram_api --port 8081
wait_for 20 python3 $CHECK/tg.py up http://127.0.0.1:8000/v1/models
wait_for 20 python3 $CHECK/tg.py up http://127.0.0.1:8081/ctl/sent

echo "# config: deploy/config.example.yaml, copied before init, then edited"
mkdir -p /etc/memgate
cp /opt/memgate/src/deploy/config.example.yaml /etc/memgate/config.yaml
/opt/memgate/.venv/bin/python - <<'EOF'
import yaml

path = "/etc/memgate/config.yaml"
config = yaml.safe_load(open(path))
config["llm"]["base_url"] = "http://127.0.0.1:8000/v1"
telegram = config["channels"]["telegram"]
telegram.update(enabled=True, allow_from=["42"], base_url="http://127.0.0.1:8081/bot",
                base_file_url="http://127.0.0.1:8081/file/bot")
text = yaml.safe_dump(config, sort_keys=False)
open(path, "w").write(text)
open("/root/check/config.good.yaml", "w").write(text)
open("/root/check/config.bad.yaml", "w").write(text + "unknown_key: 1\n")
EOF
[ -z "${TELEGRAM_BOT_TOKEN:-}" ]

step 3
step 4
step 5
