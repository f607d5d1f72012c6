# tensormorph_link_static_deps(target): `target` (an executable) links gRPC,
# protobuf and Abseil from their static archives where the system has them
# (cmake/link_static_deps.sh, its link launcher, says why and how); the
# libraries and the Python module keep linking them shared.
function(tensormorph_link_static_deps target)
  set_property(TARGET ${target} PROPERTY CXX_LINKER_LAUNCHER
    ${PROJECT_SOURCE_DIR}/cmake/link_static_deps.sh)
endfunction()
