"""hlo_structure reads a compiled step's kernels, products, attention kernels and dropout PRNG
from its optimized HLO text: checked on a hand-written module in the form XLA prints."""

from encoder.train.hlo_structure import computations, elements, opcode, structure

HLO = '\n'.join([
    'HloModule jit_train_step, is_scheduled=true',
    '',
    '%gemm_fusion_dot.1_computation (p0: bf16[8,16], p1: bf16[16,4]) -> f32[8,4] {',
    '  %p0 = bf16[8,16]{1,0} parameter(0)',
    '  %p1 = bf16[16,4]{1,0} parameter(1)',
    '  ROOT %dot.1 = f32[8,4]{1,0:T(8,128)} dot(%p0, %p1), lhs_contracting_dims={1}, '
    'rhs_contracting_dims={0}',
    '}',
    '',
    '%fused_computation.2 (param_0: u32[8,4]) -> u32[8,4] {',
    '  %param_0 = u32[8,4]{1,0} parameter(0)',
    '  %constant.3 = u32[] constant(13)',
    '  %broadcast.4 = u32[8,4]{1,0} broadcast(%constant.3), dimensions={}',
    '  ROOT %xor.5 = u32[8,4]{1,0} xor(%param_0, %broadcast.4), metadata={op_name='
    '"jit(train_step)/layer_0/Dropout_0/jit(_bernoulli)/jit(_uniform)/xor"}',
    '}',
    '',
    'ENTRY %main.9 (a: bf16[8,16], b: bf16[16,4], k: u32[8,4]) -> (f32[8,4], u32[8,4]) {',
    '  %a = bf16[8,16]{1,0} parameter(0)',
    '  %b = bf16[16,4]{1,0} parameter(1)',
    '  %k = u32[8,4]{1,0} parameter(2)',
    '  %gemm_fusion_dot.1 = f32[8,4]{1,0} fusion(%a, %b), kind=kCustom, '
    'calls=%gemm_fusion_dot.1_computation, backend_config={"operation_queue_id":"0",'
    '"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion"}}',
    '  %fusion.2 = u32[8,4]{1,0} fusion(%k), kind=kLoop, calls=%fused_computation.2',
    '  %custom-call.3 = (bf16[8,4,2]{2,1,0}, u8[0]{0}) custom-call(%a, %b), '
    'custom_call_target="__cudnn$fmhaSoftmax"',
    '  %all-reduce.4 = f32[8,4]{1,0} all-reduce(%gemm_fusion_dot.1), replica_groups={}, '
    'to_apply=%add',
    '  ROOT %tuple.5 = (f32[8,4]{1,0}, u32[8,4]{1,0}) tuple(%all-reduce.4, %fusion.2)',
    '}',
])


def test_opcodes_and_shapes_are_read_past_tiled_layouts():
  line = '%dot.1 = f32[8,4]{1,0:T(8,128)} dot(%p0, %p1), lhs_contracting_dims={1}'
  assert opcode(line) == 'dot' and elements(line) == 32
  assert opcode('ROOT %t = (f32[2]{0}, u8[0]{0}) tuple(%a, %b)') == 'tuple'


def test_the_step_is_counted_by_kernel_product_attention_and_prng():
  assert set(computations(HLO)) == {'gemm_fusion_dot.1_computation', 'fused_computation.2',
                                    'main.9'}
  found = structure(HLO)
  assert found['kernels'] == {'all-reduce': 1, 'fusion:custom': 1, 'fusion:loop': 1}
  assert found['fusions'] == 2
  assert found['products'] == {'dot': 1, 'triton_gemm': 1}
  assert found['attention_kernels'] == {'__cudnn$fmhaSoftmax': 1}
  assert found['prng'] == {'dropout_mask_ops': 1, 'dropout_mask_elements': 32}
