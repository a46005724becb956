# The device bundle's shell helpers (copied to bundle/helpers.sh by bench/bundle.sh), sourced by
# run.sh and profile.sh. POSIX sh; only shell built-ins, and tar for pack.

now() { # whole seconds since boot
  read -r up _ < /proc/uptime
  echo "${up%.*}"
}

# PACK=1: OUTDIR becomes OUTDIR.tgz, one file for the device's return trip, which brings back
# only a handful of files a call (bench/README.md). tar is the one tool of the host this uses.
pack() {
  case $1 in */*) ;; *) set -- "./$1" ;; esac
  tar czf "$1.tgz" -C "${1%/*}" "${1##*/}" && rm -r "$1" && echo "packed: $1.tgz"
}
