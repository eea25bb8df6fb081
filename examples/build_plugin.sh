# Sourced by the plugin examples' run scripts: builds the plugin in the sourcing script's folder
# the way a user outside ooze's tree would, against ooze's installed plugin files (OUT/sdk), into
# OUT/plugin. Reads here (the plugin's folder), OUT, BUILD_DIR and PLUGIN_LIBRARY (the library's
# file name); sets PLUGIN to the built library unless PLUGIN already names one.
mkdir -p "$OUT"
if [ -z "${PLUGIN:-}" ]; then
  echo "plugin: installing ooze's plugin files into $OUT/sdk and building against them"
  generator=()
  if command -v ninja > /dev/null; then generator=(-G Ninja); fi
  {
    cmake --install "$BUILD_DIR" --prefix "$OUT/sdk" &&
      cmake -S "$here" -B "$OUT/plugin" "${generator[@]}" -DCMAKE_PREFIX_PATH="$OUT/sdk" &&
      cmake --build "$OUT/plugin"
  } > "$OUT/plugin.log" 2>&1 || { tail -n 20 "$OUT/plugin.log" >&2; exit 1; }
  PLUGIN="$OUT/plugin/$PLUGIN_LIBRARY"
fi
