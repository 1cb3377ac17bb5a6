#!/bin/sh
# test_doc_citations.sh: every "formats.md §N" that a source file or document cites names a section
# of docs/formats.md ("## N." or "### Na."), and no file cites a formats.md outside the repository,
# so a reader can follow each citation without the notes the code was first written from.
. tests/support/testlib.sh

doc=docs/formats.md
[ -f "$doc" ] || { fail doc_citations "$doc is missing"; exit $failed; }
files=$(git ls-files 2>/dev/null | grep -E '\.(c|h|py|sh|md)$')
[ -n "$files" ] || files=$(find src opencl examples tests include port -name '*.[ch]' -o -name '*.py' -o -name '*.sh')
# shellcheck disable=SC2086
cited=$(grep -ohE 'formats\.md §[0-9]+[a-z]?' $files 2>/dev/null | sed 's/.*§//' | sort -u)
missing=
for s in $cited; do
  grep -qE "^#+ $s\\. " "$doc" || missing="$missing §$s"
done
n=$(echo "$cited" | wc -w)
if [ "$n" -gt 0 ] && [ -z "$missing" ]; then pass sections_exist; else fail sections_exist "cited but not in $doc:$missing"; fi
# shellcheck disable=SC2086
outside=$(grep -nE 'formats\.md' $files 2>/dev/null | grep -vE 'docs/formats\.md|^docs/formats\.md:|test_doc_citations' | head -5)
if [ -z "$outside" ]; then pass cites_in_repo; else fail cites_in_repo "a formats.md citation outside docs/: $outside"; fi
exit $failed
