# Sourced by cute_option_visit.sh: write a schedule option under trial into this tree's copy of
# the CuTe kernel (the device's copy; the caller restores it).
#   schedule_option KERNEL OPTION
# OPTION: SCHEDULE keywords appended to its bias_bulk line (" key=value,"). Returns 2 when the
# edit fails.
schedule_option() {
  local kernel=$1 option=$2
  sed -i "s/^\(    bias_bulk=True,.*,\)\$/\1$option/" "$kernel"
  grep -qF "$option" "$kernel" || { echo "could not add '$option' to SCHEDULE"; return 2; }
}
