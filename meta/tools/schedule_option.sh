# Sourced by the visit scripts: write schedule options under trial into this tree's copy of the
# CuTe kernel (the device's copy; the caller restores it).
#   schedule_option KERNEL OPTION PAIRED
# OPTION: SCHEDULE keywords appended to its bias_bulk line (" key=value,"; empty or "schedule":
# none); PAIRED: PAIRED_GROUPS' value ("8, 4"; empty: unchanged). Returns 2 when an edit fails.
schedule_option() {
  local kernel=$1 option=$2 paired=$3
  if [ -n "$option" ] && [ "$option" != schedule ]; then
    sed -i "s/^\(    bias_bulk=True,.*,\)\$/\1$option/" "$kernel"
    grep -qF "$option" "$kernel" || { echo "could not add '$option' to SCHEDULE"; return 2; }
  fi
  if [ -n "$paired" ]; then
    sed -i "s/^PAIRED_GROUPS = (.*)\$/PAIRED_GROUPS = ($paired)/" "$kernel"
    grep -q "^PAIRED_GROUPS = ($paired)\$" "$kernel" || { echo "could not set PAIRED_GROUPS to ($paired)"; return 2; }
  fi
}
