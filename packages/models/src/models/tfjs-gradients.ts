/**
 * TF.js's gradient rules. The Node build of `@tensorflow/tfjs-core` registers none (its
 * `register_all_gradients` module is browser-style ESM that Node cannot load), so `tf.variableGrads`
 * would fail with "gradient function not found". The union package `@tensorflow/tfjs` registers all
 * of them on the one shared engine when it loads; the models import this module for that effect.
 */
import "@tensorflow/tfjs";
