# zb_set_warnings(target): -Wall -Wextra for C++ and for the host compiler behind nvcc.
function(zb_set_warnings target)
  set(_cxx_flags -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor)
  if(ZB_WERROR)
    list(APPEND _cxx_flags -Werror)
  endif()
  list(JOIN _cxx_flags "," _host_flags)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${_cxx_flags}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --Werror=all-warnings>)
endfunction()
