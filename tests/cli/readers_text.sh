#!/bin/bash
# What the readers print, with the real binary (stdout and stderr as a terminal gets them):
#   - file text (PCD field names and header lines, guess tokens, file names in warnings and
#     errors) carries no terminal control character: ESC, BEL and CR are shown as \xNN;
#   - the precision warning names an option that exists, and following it silences it;
#   - convert refuses a .bin that float32 would move by more than 1 mm, names the loss, and
#     writes it with --allow-precision-loss;
#   - numbers in errors keep their digits (1e-9, not 0.000000);
#   - --origin takes auto, zero or X,Y,Z and refuses anything else.
#   readers_text.sh NDTCU SAMPLE_DIR WORK
exe=$1 sample=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAILED: $*" >&2; exit 1; }
esc=$(printf '\033') bel=$(printf '\007') cr=$(printf '\r')
# Fails when file $1 holds ESC, BEL or CR.
no_controls() {
  if LC_ALL=C grep -q "[$esc$bel$cr]" "$1"; then
    fail "$2: raw control characters in the output: $(od -c "$1" | head -5)"
  fi
}

# A field name that sets the window title and clears the screen.
printf 'VERSION 0.7\nFIELDS x y z \033]0;pwned\007\033[2J\nSIZE 4 4 4 4\nTYPE F F F F\nCOUNT 1 1 1 1\nWIDTH 1\nHEIGHT 1\nPOINTS 1\nDATA ascii\n1 2 3 4\n' >title.pcd
"$exe" info title.pcd >out.txt 2>&1 || fail "info title.pcd: $(cat out.txt)"
no_controls out.txt "info title.pcd"
grep -qF 'x:F4 y:F4 z:F4 \x1B]0;pwned\x07\x1B[2J:F4' out.txt || fail "info title.pcd does not show the field escaped: $(cat out.txt)"

# A header line that is all terminal commands: an error quoting it.
printf '\033[2J\033[H\rVERSION 0.7\nFIELDS x y z\nWIDTH 1\nPOINTS 1\nDATA ascii\n1 2 3\n' >clear.pcd
"$exe" info clear.pcd >out.txt 2>&1 && fail "info clear.pcd succeeded"
no_controls out.txt "info clear.pcd"
grep -qF "unexpected header line starting with '\\x1B[2J\\x1B[H'" out.txt || fail "info clear.pcd: $(cat out.txt)"

# A file whose name holds ESC, with a point float32 cannot hold: the warning names it.
name=$(printf 'far\033]0;pwned\007.pcd')
printf 'VERSION 0.7\nFIELDS x y z\nSIZE 8 8 8\nTYPE F F F\nWIDTH 2\nPOINTS 2\nDATA ascii\n1 2 3\n1e39 0 0\n' >"$name"
"$exe" info "$name" >out.txt 2>&1 || fail "info far.pcd: $(cat out.txt)"
no_controls out.txt "info of a file named with ESC"
grep -qF 'far\x1B]0;pwned\x07.pcd: dropped 1 points with a coordinate beyond' out.txt || fail "no escaped warning: $(cat out.txt)"

# A guess file with a terminal command for a value.
printf '1 2 3 \033[2J 5 6\n' >guesses.txt
"$exe" align "$sample/map.pcd" "$sample/scans/000000.pcd" --guesses guesses.txt >out.txt 2>&1 && fail "align --guesses succeeded"
no_controls out.txt "align --guesses"
grep -qF "value 4 '\\x1B[2J' is not a number" out.txt || fail "align --guesses: $(cat out.txt)"

# The precision warning: 6 of 10 points at zero keep the origin at zero, the 4 at 12 km then
# lose millimetres; the warning names --origin and the value that keeps them, and with it
# there is no warning.
{
  printf 'VERSION 0.7\nFIELDS x y z\nSIZE 8 8 8\nTYPE F F F\nWIDTH 10\nPOINTS 10\nDATA ascii\n'
  for k in 0 1 2 3 4 5; do echo "0.$k 0 0"; done
  for k in 0 1 2 3; do echo "12000.00$k 5 1"; done
} >lopsided.pcd
"$exe" info lopsided.pcd >out.txt 2>&1 || fail "info lopsided.pcd: $(cat out.txt)"
grep -qF "4 of 10 points lie more than 8.4 km from the cloud's origin (0, 0, 0)" out.txt || fail "no precision warning: $(cat out.txt)"
origin=$(sed -n "s/.*keeps millimetres: \([-0-9.e+]*,[-0-9.e+]*,[-0-9.e+]*\) (ndtcu's --origin.*/\1/p" out.txt)
[ "$origin" = "6000,3,1" ] || fail "the warning suggests origin '$origin': $(cat out.txt)"
"$exe" info lopsided.pcd --origin "$origin" >out.txt 2>&1 || fail "info --origin $origin: $(cat out.txt)"
grep -q "warning" out.txt && fail "still a warning with --origin $origin: $(cat out.txt)"
grep -qF "origin     6000 3 1" out.txt || fail "info --origin does not show the origin: $(cat out.txt)"

# A UTM cloud: .pcd keeps float64; .bin, whose float32 is 0.25 m apart at 3.9e6 m, would
# move a point by 0.044 m and is refused.
printf 'VERSION 0.7\nFIELDS x y z\nSIZE 8 8 8\nTYPE F F F\nWIDTH 2\nPOINTS 2\nDATA ascii\n680000.123 3900000.456 40.789\n680001.5 3900002.25 41\n' >utm.pcd
"$exe" convert utm.pcd utm_copy.pcd >out.txt 2>&1 || fail "convert to .pcd: $(cat out.txt)"
"$exe" convert utm.pcd utm.bin >out.txt 2>&1 && fail "convert to .bin succeeded: $(cat out.txt)"
[ -e utm.bin ] && fail "a refused .bin was written"
grep -qF "utm.bin: KITTI .bin stores float32 world coordinates, which move this cloud's points by up to 0.044 m (point 0: y 3900000.456 m becomes 3900000.500)" out.txt ||
  fail "convert to .bin: $(cat out.txt)"
grep -qF -- "--allow-precision-loss" out.txt || fail "convert to .bin does not name the option: $(cat out.txt)"
"$exe" convert utm.pcd utm.bin --allow-precision-loss >out.txt 2>&1 || fail "convert --allow-precision-loss: $(cat out.txt)"
grep -qF "move this cloud's points by up to 0.044 m" out.txt || fail "no warning with --allow-precision-loss: $(cat out.txt)"
[ "$(stat -c %s utm.bin)" = 32 ] || fail "utm.bin holds $(stat -c %s utm.bin) bytes"

# Numbers in errors keep their digits.
"$exe" convert "$sample/map.pcd" small.pcd --voxel 1e-9 >out.txt 2>&1 && fail "convert --voxel 1e-9 succeeded"
grep -qF "voxel leaf 1e-09 m is too small" out.txt || fail "convert --voxel 1e-9: $(cat out.txt)"
grep -qF "0.000000" out.txt && fail "convert --voxel 1e-9 prints 0.000000: $(cat out.txt)"

# --origin: auto, zero or X,Y,Z.
"$exe" info utm.pcd --origin zero >out.txt 2>&1 || fail "info --origin zero: $(cat out.txt)"
grep -q "^  origin " out.txt && fail "info --origin zero shows an origin: $(cat out.txt)"
"$exe" info utm.pcd --origin 1,2 >out.txt 2>&1
rc=$?
[ $rc = 2 ] || fail "info --origin 1,2 exited $rc: $(cat out.txt)"
grep -qF "expected auto, zero or X,Y,Z" out.txt || fail "info --origin 1,2: $(cat out.txt)"
echo "readers_text: all checks passed"
