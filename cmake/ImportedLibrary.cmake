# What the project's find modules share.

# zb_version_from_header(<out> <header> <prefix> <part>...): "N.N.N" from the header's `#define <prefix><part> N`
# lines, in the order the parts are named (e.g. NCCL_ MAJOR MINOR PATCH).
function(zb_version_from_header out header prefix)
  string(REPLACE ";" "|" parts "${ARGN}")
  file(STRINGS "${header}" lines REGEX "^#define ${prefix}(${parts}) ")
  set(numbers "")
  foreach(part IN LISTS ARGN)
    string(REGEX REPLACE ".*#define ${prefix}${part} ([0-9]+).*" "\\1" number "${lines}")
    list(APPEND numbers "${number}")
  endforeach()
  string(REPLACE ";" "." version "${numbers}")
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

# zb_import_library(<package> <target> <library> <include dir>): after find_package_handle_standard_args, the
# imported target for a found library, and the cache entries hidden from the default view.
function(zb_import_library package target library include_dir)
  if(${package}_FOUND AND NOT TARGET ${target})
    add_library(${target} UNKNOWN IMPORTED)
    set_target_properties(${target} PROPERTIES
      IMPORTED_LOCATION "${library}"
      INTERFACE_INCLUDE_DIRECTORIES "${include_dir}")
  endif()
  mark_as_advanced(${package}_INCLUDE_DIR ${package}_LIBRARY)
endfunction()
