# safetensors_put_f32(<file> <tensor> <element> <4 bytes as printf octal escapes>): overwrites element <element> of
# F32 tensor <tensor> of a safetensors file in place (dd, conv=notrunc), reading the tensor's offset from the file's
# JSON header. The hardening tests plant NaN ("\\377\\377\\377\\377") and +inf ("\\000\\000\\200\\177") so.
function(safetensors_put_f32 file tensor element bytes)
  file(READ "${file}" head LIMIT 8 HEX)
  string(SUBSTRING "${head}" 0 2 b0)
  string(SUBSTRING "${head}" 2 2 b1)
  string(SUBSTRING "${head}" 4 2 b2)
  math(EXPR n "0x${b2}${b1}${b0}")
  file(READ "${file}" header OFFSET 8 LIMIT ${n})
  string(JSON begin GET "${header}" "${tensor}" data_offsets 0)
  math(EXPR at "8 + ${n} + ${begin} + 4 * ${element}")
  get_filename_component(dir "${file}" DIRECTORY)
  execute_process(COMMAND printf "${bytes}" OUTPUT_FILE "${dir}/poke.bytes")
  execute_process(COMMAND dd if=${dir}/poke.bytes of=${file} bs=1 seek=${at} count=4 conv=notrunc
                  RESULT_VARIABLE rc ERROR_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "dd could not write into ${file} at ${at}")
  endif()
endfunction()
