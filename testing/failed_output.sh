#!/usr/bin/env bash
# failed_output.sh BUILD_DIR [LINES]: after a ctest run that failed, each failed test's output
# again (its last LINES lines, 150 unless told), at the end of the log, where a CI summary that
# keeps only the log's tail shows it. ctest's --output-on-failure prints it when the test ends,
# hundreds of lines before the end of a parallel run.
set -uo pipefail
dir=$1/Testing/Temporary
lines=${2:-150}
[ -s "$dir/LastTestsFailed.log" ] || exit 0
while IFS=: read -r num name; do
  echo "======== failed: $name (test $num), the last $lines lines of its output ========"
  awk -v head="^$num/[0-9]+ Testing: " -v name="$name" '
    !inside && $0 ~ head && substr($0, index($0, "Testing: ") + 9) == name { found = 1; next }
    found && !inside && $0 == "Output:" { inside = 1; getline; next }
    inside && $0 == "<end of output>" { exit }
    inside { print }' "$dir/LastTest.log" | tail -n "$lines"
done < "$dir/LastTestsFailed.log"
