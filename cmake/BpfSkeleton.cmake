# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# BpfSkeleton.cmake: compiles a BPF C program with clang and wraps the object in a libbpf
# skeleton header, so C++ binaries embed the bytecode and need no .o file at run time.
#   tricolor_bpf_skeleton(NAME SOURCE) -> interface target NAME_skel carrying NAME.skel.h

# The BPF compiler is an option: -DBPF_CLANG=/usr/bin/clang-19. Any clang from 14 to 19 builds
# objects every supported kernel loads (tests/compilers/matrix.sh checks each).
find_program(BPF_CLANG NAMES clang clang-14 REQUIRED
             DOC "clang that compiles the BPF programs (14 to 19)")
execute_process(COMMAND ${BPF_CLANG} --version OUTPUT_VARIABLE _bpf_clang_version
                OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REGEX MATCH "clang version [0-9.]+" _bpf_clang_version "${_bpf_clang_version}")
message(STATUS "BPF compiler: ${BPF_CLANG} (${_bpf_clang_version})")
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /usr/local/sbin REQUIRED)
find_program(LLVM_STRIP NAMES llvm-strip llvm-strip-14)

# asm/types.h lives under the multiarch directory on Debian; -target bpf does not look there.
# CMake knows it (x86_64-linux-gnu) whichever compiler builds user space; gcc is asked otherwise
# (clang has no -print-multiarch).
set(TRICOLOR_MULTIARCH "${CMAKE_LIBRARY_ARCHITECTURE}")
if(NOT TRICOLOR_MULTIARCH)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-multiarch
                  OUTPUT_VARIABLE TRICOLOR_MULTIARCH OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
set(BPF_INCLUDES -I${PROJECT_SOURCE_DIR}/bpf/include -I${PROJECT_SOURCE_DIR}/bpf/lib
    -I/usr/include/${TRICOLOR_MULTIARCH})
string(TOLOWER "${CMAKE_SYSTEM_PROCESSOR}" _bpf_arch)
if(_bpf_arch MATCHES "x86_64|amd64")
  set(BPF_TARGET_ARCH x86)
elseif(_bpf_arch MATCHES "aarch64|arm64")
  set(BPF_TARGET_ARCH arm64)
else()
  set(BPF_TARGET_ARCH ${_bpf_arch})
endif()

function(tricolor_bpf_skeleton name src)
  set(obj ${CMAKE_CURRENT_BINARY_DIR}/${name}.bpf.o)
  set(skel_dir ${CMAKE_CURRENT_BINARY_DIR}/skel)
  set(skel ${skel_dir}/${name}.skel.h)
  if(LLVM_STRIP)
    # DWARF is not needed at run time (BTF stays): a smaller object to embed.
    set(strip_cmd COMMAND ${LLVM_STRIP} -g ${obj})
  endif()
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPF_CLANG} -g -O2 -target bpf -mcpu=v3 -Wall -Werror -D__TARGET_ARCH_${BPF_TARGET_ARCH}
            ${BPF_INCLUDES} -MD -MF ${obj}.d -c ${CMAKE_CURRENT_SOURCE_DIR}/${src} -o ${obj}
    ${strip_cmd}
    DEPENDS ${src}
    DEPFILE ${obj}.d
    COMMENT "BPF ${src}"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${skel_dir}
    COMMAND sh -c "${BPFTOOL} gen skeleton ${obj} name ${name} > ${skel}.tmp && mv ${skel}.tmp ${skel}"
    DEPENDS ${obj}
    COMMENT "skeleton ${name}.skel.h"
    VERBATIM)
  add_custom_target(${name}_skel_gen DEPENDS ${skel})
  add_library(${name}_skel INTERFACE)
  add_dependencies(${name}_skel ${name}_skel_gen)
  target_include_directories(${name}_skel INTERFACE ${skel_dir} ${PROJECT_SOURCE_DIR}/bpf/include)
endfunction()
