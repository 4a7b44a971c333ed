# Per-ISA compile flags. A kernel file says by its name suffix which instruction set
# it is written for; only that file is compiled with those flags, and the CPU
# dispatcher calls it only after run-time detection says the machine has them.
#   *_avx2.c     AVX2 + FMA + F16C
#   *_avx512.c   AVX-512 F/BW/DQ/VL + VNNI + BF16
#   *_amx.c      AMX tiles (int8, bf16) + AVX-512
#   *_neon.c     ARMv8.2-A with dotprod and fp16 (aarch64 only)
#   *_i8mm.c     ARMv8.6-A with i8mm (aarch64 only)
#   *_simd128.c  WebAssembly SIMD128 (emscripten only; chosen at compile time, see kernels.c)
function(cera_apply_isa_flags)
  foreach(f IN LISTS ARGN)
    if(f MATCHES "_avx2\\.c$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
    elseif(f MATCHES "_avx512\\.c$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS
        "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-mavx512vnni;-mavx512bf16")
    elseif(f MATCHES "_amx\\.c$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS
        "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-mavx512vnni;-mavx512bf16;-mamx-tile;-mamx-int8;-mamx-bf16")
    elseif(f MATCHES "_neon\\.c$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "-march=armv8.2-a+dotprod+fp16")
    elseif(f MATCHES "_i8mm\\.c$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "-march=armv8.6-a+dotprod+fp16+i8mm")
    elseif(f MATCHES "_simd128\\.c$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "-msimd128")
    endif()
  endforeach()
endfunction()
