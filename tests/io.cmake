# The IO model (src/io_model/) against the instrumented reference run.
flashattn_add_test(io_model_test io_model_test.cc)
