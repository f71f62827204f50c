# Helpers shared by the scripts in this folder. Source it: . "$(dirname "${BASH_SOURCE[0]}")/common.sh"

log() { printf '[barnraise] %s\n' "$*" >&2; }

# install_debian_package PACKAGE WHY: installs a Debian package with apt-get when running as root,
# or explains how to install it and fails.
install_debian_package() {
  local package="$1" why="$2"
  if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing Debian's $package package, needed for $why"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null
  else
    log "Debian's $package package is needed for $why. Install it with:  sudo apt-get install -y $package"
    return 1
  fi
}
