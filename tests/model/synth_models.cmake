# synth_models.cmake — the synth_models test fixture: writes the models whose goldens are
# committed under tests/model/data (see data/lfm2moe/README.md) with `cera synth`, one thread
# and a fixed seed (the output depends on nothing else). Run as cmake -DCERA=... -DOUT=... -P.
file(MAKE_DIRECTORY ${OUT})
foreach(type f32 q8_0 q4_0)
  execute_process(COMMAND ${CERA} synth test-lfm2moe ${type} -o ${OUT}/lfm2moe-${type}.gguf --seed 1 -t 1
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cera synth test-lfm2moe ${type} failed (${rc})")
  endif()
endforeach()
