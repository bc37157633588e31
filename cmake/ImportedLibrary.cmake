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

# zb_find_library(<package> HEADER <file> NAMES <library names...> VERSION <prefix> <parts...>): the body of a
# find module for a library that ships with the CUDA toolkit or in the system's folders. Looks for <file> and
# the library under <package>_ROOT, $ENV{<package>_ROOT}, $ENV{<package>_HOME} and the toolkit, reads
# <package>_VERSION from <file>'s `#define <prefix><part> N` lines, and defines <package>_FOUND,
# <package>_INCLUDE_DIR, <package>_LIBRARY and the imported target <package>::<package>. A macro, so that
# find_package_handle_standard_args sets its results in the find module's scope.
macro(zb_find_library package)
  cmake_parse_arguments(_zb_find "" "HEADER" "NAMES;VERSION" ${ARGN})
  set(_zb_find_hints ${${package}_ROOT} $ENV{${package}_ROOT} $ENV{${package}_HOME} ${CUDAToolkit_LIBRARY_ROOT})
  find_path(${package}_INCLUDE_DIR ${_zb_find_HEADER}
    HINTS ${_zb_find_hints} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(${package}_LIBRARY NAMES ${_zb_find_NAMES}
    HINTS ${_zb_find_hints} ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
  if(${package}_INCLUDE_DIR AND EXISTS "${${package}_INCLUDE_DIR}/${_zb_find_HEADER}")
    zb_version_from_header(${package}_VERSION "${${package}_INCLUDE_DIR}/${_zb_find_HEADER}" ${_zb_find_VERSION})
  endif()
  include(FindPackageHandleStandardArgs)
  find_package_handle_standard_args(${package}
    REQUIRED_VARS ${package}_LIBRARY ${package}_INCLUDE_DIR VERSION_VAR ${package}_VERSION)
  zb_import_library(${package} ${package}::${package} "${${package}_LIBRARY}" "${${package}_INCLUDE_DIR}")
endmacro()
