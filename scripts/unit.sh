#!/usr/bin/env bash
# Every test, in two pytest processes side by side: the Spark tests (`-m spark`) and the rest. Two
# processes because the Spark tests start their JVM in a process where no gRPC test has run (spawning
# the JVM from a process with live gRPC threads failed now and then); side by side because the rest
# mostly waits on servers and child processes while the Spark tests keep the cores busy, so together
# they take about as long as the Spark tests alone. The Spark tests' output is shown once the rest
# have finished; the exit status is the first failure's.
set -uo pipefail
BIN=${BIN:-.venv/bin}
spark_log=$(mktemp)
"$BIN/pytest" -m spark --durations=10 >"$spark_log" 2>&1 &
spark=$!
trap 'kill "$spark" 2>/dev/null; rm -f "$spark_log"' EXIT
"$BIN/pytest" -m "not spark" --durations=10
rest=$?
wait "$spark"
spark_status=$?
echo "--- the Spark tests (pytest -m spark), run beside the others ---"
cat "$spark_log"
exit $((rest != 0 ? rest : spark_status))
