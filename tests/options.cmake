# The option matrix: the settings users give magpie (README, Options; docs/debug.md), under which
# tests/api and tests/stress run again. An option changes which paths run - magazine sizes, how
# often and by whom reaping happens, what the arena keeps, which blocks are sampled, whether
# per-CPU magazines are used, debug mode's own allocator - so each suite must pass under each.
#
# Every configuration is defined here once, by name; each suite lists the ones it runs:
#   - the API suite (cheap, single-threaded) under each option alone, so a failure names it
#     (percpu=0 changes only its start-up there: per-CPU magazines serve threads beyond the
#     first few, and the stress suite has them);
#   - the stress suite (seconds per program) under two combinations that together set every
#     option and run both reaping paths at the highest rate, rather than the cross product.
# A test is registered as NAME@CONFIG with LABELS "<suite>;options" (and "debug" under
# MAGPIE_DEBUG). magpie reports an unknown or misspelled name or a bad value on stderr and goes on
# with the default; such a warning fails the test (OPTION_WARNING_REGEX), so a configuration
# cannot silently run as the defaults.

# option_config(NAME VARIABLE=VALUE...): a configuration and the environment that sets it.
macro(option_config name)
  set(OPTION_ENV_${name} ${ARGN})
endmacro()

option_config(percpu0 MAGPIE_OPTIONS=percpu=0)
option_config(reaper0 MAGPIE_OPTIONS=reaper=0)
option_config(mag_rounds2 MAGPIE_OPTIONS=mag_rounds=2)
option_config(reap_ms1 MAGPIE_OPTIONS=reap_ms=1)
option_config(sweep_ms1 MAGPIE_OPTIONS=sweep_ms=1)
option_config(retain0 MAGPIE_OPTIONS=retain=0)
option_config(sample1 MAGPIE_OPTIONS=sample=1)
option_config(hugepages_always MAGPIE_OPTIONS=hugepages=always)
option_config(hugepages_never MAGPIE_OPTIONS=hugepages=never)
# The heap profiler at a point per 16 KiB: most magazine misses sampled, served from the large
# path and freed, resized and measured through their records.
option_config(profile16k MAGPIE_OPTIONS=profile_rate=16k)
option_config(debug MAGPIE_DEBUG=default)
set(OPTION_LABELS_debug debug) # `ctest -L debug` runs these too
# Per-CPU magazines of 2 rounds for every thread but the first (percpu_threads=1: whatever the
# machine's CPU count), the reaper thread every millisecond taking idle CPUs' and threads'
# magazines, and an arena that keeps no free memory: every exchange between magazines, depots,
# slabs and the arena happens as often as it can; slab huge pages marked from the start, so
# that they are subreleased and collapsed again as often as the reaper can; the reaper
# publishes the live statistics every millisecond too.
option_config(small_mags
  MAGPIE_OPTIONS=mag_rounds=2,retain=0,reap_ms=1,percpu_threads=1,hugepages=always,publish_ms=1)
# Thread magazines only, no reaper thread (slow paths reap and publish, every millisecond), every
# magazine miss sampled onto a guard page, the heap profiler sampling at 4 KiB, no huge pages,
# and the threads sweeping the classes they stopped allocating as often as the clock moves.
option_config(sampled MAGPIE_OPTIONS=percpu=0,reaper=0,sample=1,reap_ms=1,profile_rate=4k,hugepages=never,publish_ms=1,sweep_ms=1)

# Per-CPU magazines on magpie's own rseq area, as before glibc 2.35: glibc registers none (its
# tunable), and every thread but the first takes the CPUs' magazines, registering the area
# itself (src/platform/os_fence.c theory 2).
option_config(rseq_own GLIBC_TUNABLES=glibc.pthread.rseq=0 MAGPIE_OPTIONS=percpu=2,percpu_threads=1)

set(OPTION_CONFIGS_API percpu0 reaper0 mag_rounds2 reap_ms1 sweep_ms1 retain0 sample1
    hugepages_always hugepages_never profile16k debug)
set(OPTION_CONFIGS_STRESS small_mags sampled debug rseq_own)

# The warnings of src/core/options.c and src/debug/debug_flags.c about MAGPIE_OPTIONS and
# MAGPIE_DEBUG.
set(OPTION_WARNING_REGEX "magpie: [a-z ]+ in MAGPIE_(OPTIONS|DEBUG) \\(")

# option_test(NAME CONFIG LABELS TIMEOUT ENV COMMAND...): test NAME@CONFIG runs COMMAND with ENV
# (a list of VARIABLE=VALUE, may be empty) and CONFIG's environment.
function(option_test name config labels timeout env)
  if(NOT DEFINED OPTION_ENV_${config})
    message(FATAL_ERROR "option_test: no configuration named '${config}' (tests/options.cmake)")
  endif()
  list(APPEND env ${OPTION_ENV_${config}})
  list(APPEND labels options ${OPTION_LABELS_${config}})
  add_test(NAME ${name}@${config} COMMAND ${ARGN})
  set_tests_properties(${name}@${config} PROPERTIES ENVIRONMENT "${env}" LABELS "${labels}"
    TIMEOUT ${timeout} FAIL_REGULAR_EXPRESSION "${OPTION_WARNING_REGEX}")
endfunction()
