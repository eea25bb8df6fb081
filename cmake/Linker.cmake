# lld links a LibTorch executable several times faster than the default BFD linker; with one
# test executable per folder and the ooze binary, linking is a large share of a fresh build.
find_program(OOZE_LLD ld.lld)
if(OOZE_LLD)
  add_link_options(-fuse-ld=lld)
endif()
