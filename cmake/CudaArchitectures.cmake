# Chooses CMAKE_CUDA_ARCHITECTURES before the CUDA language is enabled:
# the GPU present in this machine ("native") when nvidia-smi sees one, otherwise sm_80 and sm_90.
# A value given on the command line (-DCMAKE_CUDA_ARCHITECTURES=...) always wins.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  set(_zb_gpu_found FALSE)
  find_program(_zb_nvidia_smi nvidia-smi)
  if(_zb_nvidia_smi)
    execute_process(COMMAND ${_zb_nvidia_smi} -L RESULT_VARIABLE _zb_smi_rc OUTPUT_VARIABLE _zb_smi_out ERROR_QUIET)
    if(_zb_smi_rc EQUAL 0 AND _zb_smi_out MATCHES "GPU 0")
      set(_zb_gpu_found TRUE)
    endif()
  endif()
  if(_zb_gpu_found)
    set(CMAKE_CUDA_ARCHITECTURES native CACHE STRING "CUDA architectures (native: the GPU present)")
  else()
    set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures (no GPU found at configure time)")
  endif()
endif()
