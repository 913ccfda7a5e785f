# Sourced by tools/gpu/build_and_test.sh (bash). Makes Debian 12's Slurm and munge, unpacked
# with `dpkg -x` into a prefix, runnable on a machine that has neither, for the tests' one-node
# cluster (tests/support/slurm_cluster.sh):
#
#   slurm_env PREFIX
#
# Requires the packages of tools/gpu/fetch_deps.sh unpacked into PREFIX. Makes PREFIX/slurm/bin,
# links there to Slurm's and munge's programs under the names the packages' alternatives give
# them (slurmd for slurmd-wlm), and PREFIX/slurm/lib, links there to libslurmfull.so and to each
# library those programs or the basic plugins need that this machine's loader does not find
# (searched in PREFIX, in rounds, until none is left that PREFIX has). Puts both first on PATH
# and LD_LIBRARY_PATH (exported: srun's tasks inherit the library path, which therefore holds
# nothing the machine already has). Prints what it took from PREFIX and what is still missing.
# Returns non-zero when PREFIX holds no Slurm.

# The libraries that the files of the folders DIR/bin, PLUGINS and DIR/lib need and that the
# loader does not find, one per line.
slurm_env_unresolved() {
  local dir=$1 plugins=$2 found
  for found in "$dir"/bin/* "$plugins"/*.so "$dir"/lib/*; do ldd "$found" 2>/dev/null; done |
    awk '/=> not found/ {print $1}' | sort -u
}

slurm_env() {
  local prefix=$1 dir=$1/slurm plugins name found lib missing round took
  plugins=$(ls -d "$prefix"/usr/lib/*/slurm-wlm 2>/dev/null | head -n 1)
  if [ -z "$plugins" ] || [ ! -e "$prefix/usr/sbin/slurmd-wlm" ]; then
    echo "slurm_env: no Slurm unpacked in $prefix" >&2
    return 1
  fi
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/lib"
  for name in slurmctld slurmd slurmstepd srun sinfo salloc sbatch scontrol squeue scancel \
              munged munge unmunge; do
    for found in "$prefix/usr/sbin/$name-wlm" "$prefix/usr/sbin/$name" "$prefix/usr/bin/$name"; do
      if [ -e "$found" ]; then
        ln -s "$found" "$dir/bin/$name"
        break
      fi
    done
  done
  ln -s "$plugins/libslurmfull.so" "$dir/lib/libslurmfull.so"
  export PATH=$dir/bin:$PATH
  export LD_LIBRARY_PATH=$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for round in 1 2 3 4; do
    took=0
    for lib in $(slurm_env_unresolved "$dir" "$plugins"); do
      found=$(ls "$prefix"/usr/lib/*/"$lib" "$prefix"/lib/*/"$lib" 2>/dev/null | head -n 1)
      if [ -n "$found" ] && [ ! -e "$dir/lib/$lib" ]; then
        ln -s "$found" "$dir/lib/$lib"
        took=1
      fi
    done
    [ "$took" -eq 1 ] || break
  done
  missing=$(slurm_env_unresolved "$dir" "$plugins")
  echo "$(zcat "$prefix/usr/share/doc/slurm-client/changelog.Debian.gz" | head -n 1 |
    cut -d ' ' -f 1-2) from $prefix; libraries taken from there: $(ls "$dir/lib" | tr '\n' ' ')"
  [ -z "$missing" ] || echo "still not found (plugins that need them cannot load): $missing" |
    tr '\n' ' '
  echo
}
